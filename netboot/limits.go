package netboot

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// Limits are the HTTP server's deadlines and caps. A client that stops sending or
// reading is cut off by a deadline; the connection cap bounds what the rest can hold.
type Limits struct {
	// HeaderTimeout: the request line and headers must arrive within this (default 10s).
	HeaderTimeout time.Duration
	// BodyTimeout: a request body must arrive whole within this (default 30s; a 4 MiB
	// report needs about 1 Mbit/s).
	BodyTimeout time.Duration
	// WriteIdle: a response write that makes no progress for this long ends the
	// connection (default 30s). It bounds a stalled download, not a slow one.
	WriteIdle time.Duration
	// IdleTimeout: a kept-alive connection with no request is closed after this
	// (default 60s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers (default 16 KiB).
	MaxHeaderBytes int
	// MaxConns bounds open connections; past it, new ones wait in the listen backlog
	// (default 1024).
	MaxConns int
}

// DefaultLimits are the Limits a server takes for the fields left zero.
func DefaultLimits() Limits {
	return Limits{HeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second, WriteIdle: 30 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10, MaxConns: 1024}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = d.HeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = d.BodyTimeout
	}
	if l.WriteIdle <= 0 {
		l.WriteIdle = d.WriteIdle
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	return l
}

func withDefaults(r fleetdb.Retention) fleetdb.Retention {
	d := fleetdb.DefaultRetention()
	if r.ReportsPerNode == 0 {
		r.ReportsPerNode = d.ReportsPerNode
	}
	if r.ReportBytes == 0 {
		r.ReportBytes = d.ReportBytes
	}
	if r.BootsPerNode == 0 {
		r.BootsPerNode = d.BootsPerNode
	}
	if r.UnreportedNodes == 0 {
		r.UnreportedNodes = d.UnreportedNodes
	}
	return r
}

// HTTPServer is an http.Server for s with its Limits' header deadline, size and
// keep-alive bounds; the body and write deadlines are set per request by ServeHTTP.
func (s *Server) HTTPServer() *http.Server {
	l := s.opt.Limits
	return &http.Server{Handler: s, ReadHeaderTimeout: l.HeaderTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes}
}

// Serve serves HTTP on ln with the connection cap until hs is shut down.
func (s *Server) Serve(hs *http.Server, ln net.Listener) error {
	return hs.Serve(LimitListener(ln, s.opt.Limits.MaxConns))
}

// ServeHTTP implements http.Handler: the headers every answer carries, the body
// deadline of a request that has a body, and a write deadline that each write
// pushes on.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	// The pages set their own; everything else (JSON, scripts, files) loads nothing.
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	rc := http.NewResponseController(w)
	now := time.Now()
	if r.ContentLength != 0 {
		rc.SetReadDeadline(now.Add(s.opt.Limits.BodyTimeout))
	}
	rc.SetWriteDeadline(now.Add(s.opt.Limits.WriteIdle))
	s.mux.ServeHTTP(&progressWriter{ResponseWriter: w, rc: rc, idle: s.opt.Limits.WriteIdle}, r)
}

// progressWriter moves the write deadline on before every write, so a client that
// keeps reading keeps its connection and one that stops loses it after idle.
type progressWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.rc.SetWriteDeadline(time.Now().Add(p.idle))
	return p.ResponseWriter.Write(b)
}

// ReadFrom keeps the response's own ReadFrom (sendfile) in chunks, moving the deadline
// on between them.
func (p *progressWriter) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := p.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{p}, src)
	}
	const chunk = 4 << 20
	// ServeContent hands over a LimitedReader of the file: each chunk is one level
	// of LimitedReader over the file itself, which the kernel can sendfile.
	outer, _ := src.(*io.LimitedReader)
	var total int64
	for {
		p.rc.SetWriteDeadline(time.Now().Add(p.idle))
		var part *io.LimitedReader
		if outer != nil {
			part = &io.LimitedReader{R: outer.R, N: min(chunk, outer.N)}
		} else {
			part = &io.LimitedReader{R: src, N: chunk}
		}
		want := part.N
		n, err := rf.ReadFrom(part)
		total += n
		if outer != nil {
			outer.N -= n
		}
		if err != nil || n < want || want == 0 || (outer != nil && outer.N <= 0) {
			return total, err
		}
	}
}

func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// LimitListener accepts at most n connections at once; the next Accept waits until
// one closes.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
