package upserttest

import (
	"net"
	"sync"
	"time"
)

// muxListener owns the server's TCP socket for the whole life of a Server.
// Its accept loop hands every connection to the gRPC server of the current
// generation through conns; Restart swaps the gRPC server without closing
// the socket, so the port never changes and never refuses connections.
//
// It also tracks every open connection by remote address, so that a fault
// can reset the connection a request came in on.
//
// Planned: a TLS endpoint for the REST records API on the same port. route
// will then peek at the first byte of each connection (0x16 is a TLS
// handshake record; anything else is the h2c preface of a gRPC client) and
// hand TLS connections to an HTTP server's listener instead. Peeking must
// then happen in a goroutine per connection, with a read deadline.
type muxListener struct {
	root  net.Listener
	conns chan net.Conn // unbuffered: handoff to a subListener's Accept
	done  chan struct{} // closed by Close
	loop  sync.WaitGroup

	mu    sync.Mutex
	open  map[string]*trackedConn // by RemoteAddr().String()
	close sync.Once
}

func newMuxListener(root net.Listener) *muxListener {
	m := &muxListener{
		root:  root,
		conns: make(chan net.Conn),
		done:  make(chan struct{}),
		open:  make(map[string]*trackedConn),
	}
	m.loop.Add(1)
	go m.acceptLoop()
	return m
}

func (m *muxListener) acceptLoop() {
	defer m.loop.Done()
	for {
		c, err := m.root.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if ne, ok := err.(interface{ Temporary() bool }); ok && ne.Temporary() {
				time.Sleep(5 * time.Millisecond) // e.g. out of file descriptors
				continue
			}
			return
		}
		m.route(m.track(c))
	}
}

// route hands c to whoever serves its protocol. Only gRPC for now.
func (m *muxListener) route(c net.Conn) {
	select {
	case m.conns <- c:
	case <-m.done:
		c.Close()
	}
}

func (m *muxListener) track(c net.Conn) *trackedConn {
	tc := &trackedConn{Conn: c, m: m, key: c.RemoteAddr().String()}
	m.mu.Lock()
	m.open[tc.key] = tc
	m.mu.Unlock()
	return tc
}

// reset closes, with an RST, the connection whose remote address is addr,
// and reports whether there was one.
func (m *muxListener) reset(addr string) bool {
	m.mu.Lock()
	tc := m.open[addr]
	m.mu.Unlock()
	if tc == nil {
		return false
	}
	if tcp, ok := tc.Conn.(*net.TCPConn); ok {
		tcp.SetLinger(0) // Close sends an RST instead of a FIN.
	}
	tc.Close()
	return true
}

// Close closes the socket and every connection not yet handed over, and
// waits for the accept loop to end. Connections already handed over belong
// to their server, which must be stopped first.
func (m *muxListener) Close() {
	m.close.Do(func() {
		close(m.done)
		m.root.Close()
		m.loop.Wait()
	})
}

func (m *muxListener) Addr() net.Addr { return m.root.Addr() }

// listener returns a new net.Listener whose Accept takes connections from m,
// for one gRPC server generation. Closing it does not close the socket.
func (m *muxListener) listener() *subListener {
	return &subListener{m: m, closed: make(chan struct{})}
}

// trackedConn removes itself from its muxListener when closed.
type trackedConn struct {
	net.Conn
	m    *muxListener
	key  string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.m.mu.Lock()
		if c.m.open[c.key] == c {
			delete(c.m.open, c.key)
		}
		c.m.mu.Unlock()
	})
	return c.Conn.Close()
}

type subListener struct {
	m      *muxListener
	closed chan struct{}
	once   sync.Once
}

func (l *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.m.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

func (l *subListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *subListener) Addr() net.Addr { return l.m.Addr() }
