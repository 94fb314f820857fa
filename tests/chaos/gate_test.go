package chaos_test

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// gates delays responses: while a broker address is gated, reads on the
// producer's connections to it wait for the gate's release (or the read
// deadline kgo set, or Close). The broker has already handled whatever it
// was sent, so this is a response delay: "written, outcome unknown".
//
// This replaces kfake's ControlKey+SleepControl recipe: with several delays
// in play, a request queued behind a slept one that sleeps itself hits a data
// race inside kfake (bsleep.enqueue vs bsleep.waitQueue, cluster.go:1160 and
// 1287), which -race reports.
type gates struct {
	mu sync.Mutex
	m  map[string]chan struct{}

	// expired, if set, is signaled (without blocking) when a gated read
	// on a produce connection (one that has written a Produce request)
	// gives up at its deadline. Reads on other connections (metadata,
	// client metrics) time out too while a gate is held, and must not be
	// mistaken for a lost produce response.
	expired chan struct{}

	conns map[string]map[*gateConn]struct{} // open connections by address, guarded by mu
}

// kill closes every open connection to addr: the broker went away.
func (g *gates) kill(addr string) int {
	g.mu.Lock()
	var cs []*gateConn
	for c := range g.conns[addr] {
		cs = append(cs, c)
	}
	g.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	return len(cs)
}

func (g *gates) hold(addr string) (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	if g.m == nil {
		g.m = make(map[string]chan struct{})
	}
	if old := g.m[addr]; old != nil {
		ch = old // already held: share the release
	} else {
		g.m[addr] = ch
	}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.m[addr] == ch {
			delete(g.m, addr)
			close(ch)
		}
	}
}

func (g *gates) get(addr string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[addr]
}

func (g *gates) dial(ctx context.Context, network, host string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	c := &gateConn{Conn: conn, g: g, addr: host, closed: make(chan struct{})}
	g.mu.Lock()
	if g.conns == nil {
		g.conns = make(map[string]map[*gateConn]struct{})
	}
	if g.conns[host] == nil {
		g.conns[host] = make(map[*gateConn]struct{})
	}
	g.conns[host][c] = struct{}{}
	g.mu.Unlock()
	return c, nil
}

type gateConn struct {
	net.Conn
	g    *gates
	addr string

	produce atomic.Bool // has written a Produce request

	mu        sync.Mutex
	deadline  time.Time
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *gateConn) setRD(t time.Time) {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
}

func (c *gateConn) SetDeadline(t time.Time) error {
	c.setRD(t)
	return c.Conn.SetDeadline(t)
}

func (c *gateConn) SetReadDeadline(t time.Time) error {
	c.setRD(t)
	return c.Conn.SetReadDeadline(t)
}

// Write notes a Produce request: kgo writes a request in one call, and a
// request starts with its size (int32) and API key (int16, Produce is 0).
func (c *gateConn) Write(b []byte) (int, error) {
	if len(b) >= 6 && binary.BigEndian.Uint16(b[4:6]) == uint16(kmsg.Produce) {
		c.produce.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *gateConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.g.mu.Lock()
		delete(c.g.conns[c.addr], c)
		c.g.mu.Unlock()
	})
	return c.Conn.Close()
}

func (c *gateConn) Read(b []byte) (int, error) {
	if gate := c.g.get(c.addr); gate != nil {
		c.mu.Lock()
		dl := c.deadline
		c.mu.Unlock()
		var expired <-chan time.Time
		if !dl.IsZero() {
			t := time.NewTimer(time.Until(dl))
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-gate:
		case <-expired:
			if c.g.expired != nil && c.produce.Load() {
				select {
				case c.g.expired <- struct{}{}:
				default:
				}
			}
			return 0, os.ErrDeadlineExceeded
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	return c.Conn.Read(b)
}
