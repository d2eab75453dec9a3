package redistest

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a loopback TCP proxy to a server's socket that delays every
// chunk it forwards, in each direction, by a fixed latency, keeping their
// order; Hold stops forwarding until Release.
type Proxy struct {
	ln      net.Listener
	target  string
	latency time.Duration

	mu    sync.Mutex
	held  chan struct{} // closed when released; nil when not held
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on a loopback port and forwards to the unix socket
// target with latency added each way.
func NewProxy(target string, latency time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, latency: latency, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Hold stops forwarding: what arrives waits until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Release forwards again, what waited first.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Release()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("unix", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(server, client) })
		p.wg.Go(func() { p.pipe(client, server) })
	}
}

// chunk is data read at a time.
type chunk struct {
	data []byte
	at   time.Time
}

// pipe copies from src to dst, each chunk latency after it was read.
func (p *Proxy) pipe(dst, src net.Conn) {
	queue := make(chan chunk, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer dst.Close()
		for c := range queue {
			time.Sleep(time.Until(c.at.Add(p.latency)))
			p.wait()
			if _, err := dst.Write(c.data); err != nil {
				for range queue { // drain, so that the reader is never stuck
				}
				return
			}
		}
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			break
		}
	}
	close(queue)
	wg.Wait()
}

func (p *Proxy) wait() {
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	if held != nil {
		<-held
	}
}
