package korder

import (
	"context"
	"math/bits"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A carrier takes a record handed to kgo on the lock-free path to its kgo
// promise: the unit, the record's number and the caller's context and
// promise. Allocating one per record (a closure) costs more than
// everything else korder does per record, mostly in garbage collection,
// so each unit keeps a ring of carriers, each with its promise bound once,
// and reuses them.
//
// A record numbered seq uses slot seq&mask of its unit's ring if that slot
// is free (the record that used it last has finished), and otherwise
// allocates a closure as before: a claim is a compare-and-swap, so two
// records that map to the same slot cannot both take it. A ring that
// misses often, because more records are in flight than it has carriers,
// grows (see missed), up to maxCarriersFor the client's MaxBufferedRecords;
// records whose carrier is in the old ring finish in it, and the old ring
// is garbage once they have. Growing allocates the new ring, and binds a
// promise for each of its carriers, on the goroutine of the Produce call
// that missed. A ring never shrinks.
type carrier struct {
	busy    atomic.Bool
	seq     uint64
	u       *unit
	ctx     context.Context
	promise func(*kgo.Record, error)
	sp      *slowPart                // pinned: see throttle.go
	done    func(*kgo.Record, error) // c.finish, bound once
}

type carrierRing struct {
	mask  uint64
	slots []carrier
}

// minCarriers is the size of a unit's first ring, and maxCarriers the
// most a ring may have (72 bytes each, with the bound promise): a unit
// with more records in flight allocates for those that find no carrier.
const (
	minCarriers = 64
	maxCarriers = 1 << 17
)

// maxCarriersFor returns the largest ring for a client that buffers up to
// maxBuffered records: the power of two at or above twice that, so that a
// unit with every record the client buffers in flight, and as many again
// whose promises are queued, still finds free carriers; but at least
// minCarriers and at most maxCarriers. (kgo's default, 50000 records,
// gives maxCarriers.)
func maxCarriersFor(maxBuffered int64) int {
	n := max(2*min(maxBuffered, maxCarriers/2), minCarriers)
	return 1 << bits.Len64(uint64(n-1))
}

func newCarrierRing(u *unit, size int) *carrierRing {
	r := &carrierRing{mask: uint64(size - 1), slots: make([]carrier, size)}
	for i := range r.slots {
		c := &r.slots[i]
		c.u = u
		c.done = c.finish
	}
	return r
}

// claim returns a free carrier for the record numbered seq, set up with
// ctx and promise, or nil if there is none: the caller then allocates.
func (u *unit) claim(seq uint64, ctx context.Context, promise func(*kgo.Record, error), sp *slowPart) *carrier {
	if r := u.carriers.Load(); r != nil {
		c := &r.slots[seq&r.mask]
		if !c.busy.Load() && c.busy.CompareAndSwap(false, true) {
			c.seq, c.ctx, c.promise, c.sp = seq, ctx, promise, sp
			return c
		}
	}
	u.missed()
	return nil
}

// missed counts a record that found no free carrier. Once the misses reach
// a quarter of the ring, the ring grows if the unit has at least half as
// many records in flight as it has carriers: to twice its size, or twice
// the records in flight if that is more, so that a unit whose load climbs
// fast gets there in a step or two. Otherwise the misses are forgotten:
// they came from a few records that stay in flight while the ring comes
// round to them (a slow partition, say), which a bigger ring would keep,
// not avoid. So a ring holds at most four times the unit's most records in
// flight, rounded up to a power of two, and at least minCarriers.
func (u *unit) missed() {
	n := u.misses.Add(1)
	r := u.carriers.Load()
	size := 0
	if r != nil {
		size = len(r.slots)
	}
	if size >= u.p.maxCarriers || n < uint64(size/4) || !u.growing.CompareAndSwap(false, true) {
		return
	}
	defer u.growing.Store(false)
	if u.carriers.Load() != r {
		return // another claim grew the ring meanwhile
	}
	u.misses.Store(0)
	inflight := int(min(u.inflight(), maxCarriers))
	if r != nil && inflight < size/2 {
		return
	}
	want := max(2*size, minCarriers, 2*inflight)
	want = min(1<<bits.Len(uint(want-1)), u.p.maxCarriers)
	u.carriers.Store(newCarrierRing(u, want))
}

// finish is a carrier's kgo promise. It frees the carrier before calling
// anything, so that the carrier may be reused at once.
func (c *carrier) finish(r *kgo.Record, err error) {
	u, seq, ctx, promise, sp := c.u, c.seq, c.ctx, c.promise, c.sp
	c.ctx, c.promise, c.sp = nil, nil, nil
	c.busy.Store(false)
	u.finishFast(r, err, seq, ctx, promise, sp)
}

// finishFast is the kgo promise of a record handed to kgo on the
// lock-free path, whether a carrier or a closure brought it.
func (u *unit) finishFast(r *kgo.Record, err error, seq uint64, ctx context.Context, promise func(*kgo.Record, error), sp *slowPart) {
	unpin(r)
	if err == nil || !isProduceFailure(err) {
		if sp != nil {
			u.p.slowOut(u, sp)
		} else if u.t.pin != nil {
			u.unpinned.Add(-1)
		}
		if err != nil {
			err = closedErr(err)
		}
		promise(r, err)
		u.countOut()
		return
	}
	// A failure: finished counts it out of its partition when it
	// collects it.
	u.p.finished(u, &pending{seq: seq, ctx: ctx, r: r, promise: promise, sp: sp, up: sp == nil && u.t.pin != nil}, err)
}
