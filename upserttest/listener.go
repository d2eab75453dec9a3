package upserttest

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// muxListener owns the server's TCP socket for the whole life of a Server.
// It serves two protocols on the one port, as Pinecone's index hosts do:
// gRPC in plaintext (h2c), which the SDK uses for vectors, and HTTPS, which
// the SDK uses for the REST records API (it rewrites "http://" hosts to
// "https://" for REST). For every accepted connection, a goroutine peeks at
// its first byte, with a read deadline: 0x16 starts a TLS handshake record,
// and the connection goes to the HTTPS server; anything else is the h2c
// preface of a gRPC client. The connection is then handed, with the peeked
// byte put back, to the server of the current generation through grpcConns
// or tlsConns; Restart swaps the servers without closing the socket, so the
// port never changes and never refuses connections.
//
// It also tracks every open connection by remote address, so that a fault
// can reset the connection a request came in on.
type muxListener struct {
	root      net.Listener
	grpcConns chan net.Conn // unbuffered: handoff to a subListener's Accept
	tlsConns  chan net.Conn // likewise, for the HTTPS server
	done      chan struct{} // closed by Close
	accepting sync.WaitGroup
	routing   sync.WaitGroup // routeConn goroutines

	mu    sync.Mutex
	open  map[string]*trackedConn // by RemoteAddr().String()
	close sync.Once
}

// sniffTimeout bounds the wait for the first byte of a connection. Both gRPC
// and TLS clients speak first, at once.
const sniffTimeout = 10 * time.Second

// tlsRecordHandshake is the first byte of a TLS connection (a handshake
// record holding the ClientHello).
const tlsRecordHandshake = 0x16

func newMuxListener(root net.Listener) *muxListener {
	m := &muxListener{
		root:      root,
		grpcConns: make(chan net.Conn),
		tlsConns:  make(chan net.Conn),
		done:      make(chan struct{}),
		open:      make(map[string]*trackedConn),
	}
	m.accepting.Add(1)
	go m.acceptLoop()
	return m
}

func (m *muxListener) acceptLoop() {
	defer m.accepting.Done()
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
		tc := m.track(c)
		m.routing.Add(1)
		go m.route(tc)
	}
}

// route peeks at the first byte of c and hands c to whoever serves its
// protocol, or closes it if it sends nothing in time or m is closed.
func (m *muxListener) route(c *trackedConn) {
	defer m.routing.Done()
	var first [1]byte
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	if _, err := c.Read(first[:]); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	to := m.grpcConns
	if first[0] == tlsRecordHandshake {
		to = m.tlsConns
	}
	select {
	case to <- &sniffedConn{trackedConn: c, first: first[0]}:
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
		_ = tcp.SetLinger(0) // Close sends an RST instead of a FIN.
	}
	tc.Close()
	return true
}

// Close closes the socket and every connection still open (those not yet
// handed over, and any that their server left open), and waits for the
// accept loop and the routing goroutines to end. Connections already handed
// over belong to their server, which should be stopped first.
func (m *muxListener) Close() {
	m.close.Do(func() {
		close(m.done)
		m.root.Close()
		m.accepting.Wait() // no connection is tracked after this
		m.mu.Lock()
		open := make([]*trackedConn, 0, len(m.open))
		for _, tc := range m.open {
			open = append(open, tc)
		}
		m.mu.Unlock()
		for _, tc := range open {
			tc.Close() // interrupts a route blocked reading the first byte
		}
		m.routing.Wait()
	})
}

func (m *muxListener) Addr() net.Addr { return m.root.Addr() }

// grpcListener returns a new net.Listener whose Accept takes the gRPC
// connections of m, for one server generation. Closing it does not close
// the socket.
func (m *muxListener) grpcListener() *subListener {
	return &subListener{m: m, conns: m.grpcConns, closed: make(chan struct{})}
}

// tlsListener is like grpcListener, for the connections that start a TLS
// handshake. They are returned as they are, not yet decrypted.
func (m *muxListener) tlsListener() *subListener {
	return &subListener{m: m, conns: m.tlsConns, closed: make(chan struct{})}
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

// sniffedConn is a trackedConn whose first byte, already read by route, is
// read again first.
type sniffedConn struct {
	*trackedConn
	first    byte
	replayed atomic.Bool
}

func (c *sniffedConn) Read(p []byte) (int, error) {
	if len(p) > 0 && c.replayed.CompareAndSwap(false, true) {
		p[0] = c.first
		return 1, nil
	}
	return c.trackedConn.Read(p)
}

type subListener struct {
	m      *muxListener
	conns  <-chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
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
