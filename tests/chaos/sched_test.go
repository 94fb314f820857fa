package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// scheduler injects faults, one draw per tick from the run's chooser. Every
// fault it leaves behind is removed when it stops: fault handles removed,
// delayed requests released, pending controls disarmed.
type scheduler struct {
	r        *run
	schedule []string
	n        int
	handles  []*kfake.FaultHandle
	releases []func()
	timed    map[int][]func()
	stopped  atomic.Bool

	nodes map[int32]string // live brokers: node ID -> address
	down  int32            // the removed broker, -1 if none
	port  int              // its port, to add it back on
}

func newScheduler(r *run) *scheduler {
	s := &scheduler{r: r, timed: make(map[int][]func()), nodes: make(map[int32]string), down: -1}
	// kfake numbers its brokers from 0, in ListenAddrs order.
	for i, addr := range r.c.ListenAddrs() {
		s.nodes[int32(i)] = addr
	}
	return s
}

func (s *scheduler) note(format string, args ...any) {
	line := fmt.Sprintf("t=%-6v tick=%-3d ", time.Since(s.r.start).Truncate(time.Millisecond), s.n) + fmt.Sprintf(format, args...)
	s.schedule = append(s.schedule, line)
	s.r.hist.add(evFault, nil, nil, -2, line)
}

func (s *scheduler) loop(quit chan struct{}) {
	tk := time.NewTicker(s.r.rc.tick)
	defer tk.Stop()
	for {
		select {
		case <-quit:
			s.stop()
			return
		case <-tk.C:
		}
		s.n++
		for _, fn := range s.timed[s.n] {
			fn()
		}
		delete(s.timed, s.n)
		s.inject()
	}
}

func (s *scheduler) after(ticks int, fn func()) { s.timed[s.n+ticks] = append(s.timed[s.n+ticks], fn) }

var nonRetryable = []*kerr.Error{kerr.InvalidRecord, kerr.MessageTooLarge, kerr.CorruptMessage, kerr.PolicyViolation, kerr.TopicAuthorizationFailed}

func (s *scheduler) inject() {
	r, rc, ch := s.r, s.r.rc, s.r.ch
	c := r.c
	switch ch.intn(12) {
	case 3: // a broker error, answered to the next N requests for a partition
		e := nonRetryable[ch.intn(len(nonRetryable))]
		p := int32(ch.intn(rc.partitions))
		n := 1 + ch.intn(3)
		s.note("fault %s on partition %d, %d requests", e.Message, p, n)
		s.handles = append(s.handles, c.Fault(kfake.Fault{
			Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Partitions: []int32{p}, Err: e, Count: n,
		}))
	case 4: // NOT_ENOUGH_REPLICAS for a while: RecordRetries runs out
		p := int32(ch.intn(rc.partitions))
		ticks := 1 + ch.intn(4)
		s.note("fault NOT_ENOUGH_REPLICAS on partition %d for %d ticks", p, ticks)
		h := c.Fault(kfake.Fault{
			Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Partitions: []int32{p}, Err: kerr.NotEnoughReplicas, Count: -1,
		})
		s.handles = append(s.handles, h)
		s.after(ticks, func() { h.Remove(); s.note("removed NOT_ENOUGH_REPLICAS on partition %d", p) })
	case 5: // hold a broker's responses for a while
		ticks := 1 + ch.intn(5)
		addrs := c.ListenAddrs()
		addr := addrs[ch.intn(len(addrs))]
		release := r.gates.hold(addr)
		s.releases = append(s.releases, release)
		s.note("delay responses from %s for %d ticks", addr, ticks)
		s.after(ticks, func() { release(); s.note("released responses from %s", addr) })
	case 6: // close the connection of the next produce request, unanswered
		s.note("drop the connection of the next produce request")
		c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			if s.stopped.Load() {
				c.DropControl()
				return nil, nil, false
			}
			return nil, errors.New("chaos: dropped connection"), true
		})
	case 7: // move a partition's leadership
		p := int32(ch.intn(rc.partitions))
		to := int32(ch.intn(rc.brokers))
		if rc.brokers < 2 {
			return
		}
		if lead := c.LeaderFor(chaosTopic, p); lead == to {
			to = (to + 1) % int32(rc.brokers)
		}
		err := c.MoveTopicPartition(chaosTopic, p, to)
		s.note("move partition %d to node %d: err=%v", p, to, err)
	case 8: // cancel the context of the cancelable records produced so far
		r.cancelMu.Lock()
		cancel := r.cancelFn
		r.cancelCtx, r.cancelFn = context.WithCancel(context.Background())
		r.cancelMu.Unlock()
		cancel()
		s.note("cancel record contexts")
	case 9: // remove a broker (its connections die with it), add it back later
		if rc.brokers < 2 || s.down >= 0 {
			return
		}
		ids := slices.Sorted(maps.Keys(s.nodes))
		node := ids[ch.intn(len(ids))]
		ticks := 1 + ch.intn(6)
		addr := s.nodes[node]
		if err := c.RemoveNode(node); err != nil {
			s.note("remove broker %d (%s): %v", node, addr, err)
			return
		}
		killed := r.gates.kill(addr)
		s.note("remove broker %d (%s) for %d ticks, %d connections closed", node, addr, ticks, killed)
		_, port, _ := net.SplitHostPort(addr)
		s.port, _ = strconv.Atoi(port)
		s.down = node
		delete(s.nodes, node)
		s.after(ticks, s.addBack)
	case 10: // the next record created is too large for a batch
		r.jumboNext.Store(true)
		s.note("the next record is too large for a batch")
	}
}

// addBack adds the removed broker back, on its old port if it can.
func (s *scheduler) addBack() {
	if s.down < 0 {
		return
	}
	c := s.r.c
	node, port, err := c.AddNode(s.down, s.port)
	if err != nil {
		// The port was taken meanwhile: a new one; the client learns it
		// from metadata.
		node, port, err = c.AddNode(s.down, 0)
	}
	s.note("add broker %d back on port %d: err=%v", node, port, err)
	if err == nil {
		s.nodes[node] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.down = -1
	}
}

func (s *scheduler) stop() {
	s.stopped.Store(true)
	s.addBack()
	for _, h := range s.handles {
		h.Remove()
	}
	for _, release := range s.releases {
		release()
	}
	s.note("stop: %d fault handles removed, %d delays released", len(s.handles), len(s.releases))
}
