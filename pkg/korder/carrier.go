package korder

import (
	"context"
	"math/bits"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A carrier takes a record on the no-failure path to its promise: the
// promise and, in state, the lap of the ring the record's number is in and
// whether it is busy; the context travels in the record's Context. Its kgo
// promise is bound once, when the ring is made: no allocation.
//
// Carriers live in a ring indexed by the record's number (seq&mask), 16
// bytes each, written in Produce order. A record whose slot is busy (the
// record a lap before it is in flight), or with a Context of its own, takes
// a closure instead; a claim is a compare-and-swap. A ring that misses often
// grows, one that stays mostly free shrinks (see resize); records whose
// carrier is in the old ring finish in it.
type carrier struct {
	state   atomic.Uint64 // lap<<1 | busy
	promise func(*kgo.Record, error)
}

type carrierRing struct {
	shift uint   // log2 of the ring's size
	mask  uint64 // size-1
	slots []carrier
	dones []func(*kgo.Record, error) // slot i's kgo promise, bound once
	low   int                        // laps in a row with few records in flight (see resize)
	peak  int                        // the most in flight over those laps
}

// A ring has from minCarriers (a Producer's first) to maxCarriers carriers
// (56 bytes each; records in flight beyond allocate); shrinkLaps: resize.
const (
	minCarriers = 256
	maxCarriers = 1 << 17
	shrinkLaps  = 4
)

func (p *Producer) newCarrierRing(size int) *carrierRing {
	rg := &carrierRing{
		shift: uint(bits.TrailingZeros(uint(size))),
		mask:  uint64(size - 1),
		slots: make([]carrier, size),
		dones: make([]func(*kgo.Record, error), size),
	}
	for i := range uint64(size) {
		rg.dones[i] = func(r *kgo.Record, err error) { p.carried(rg, i, r, err) }
	}
	return rg
}

// carry gives a record to kgo, with a carrier for its promise if its slot
// is free, else with a closure.
func (p *Producer) carry(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error), seq uint64) {
	if r.Context == nil {
		r.Context = ctx
		if rg := p.ring.Load(); rg != nil {
			i := seq & rg.mask
			if i == 0 { // a lap: see resize
				p.resize(rg, false)
			}
			c := &rg.slots[i]
			if st := c.state.Load(); st&1 == 0 && c.state.CompareAndSwap(st, (seq>>rg.shift)<<1|1) {
				c.promise = promise
				p.cl.Produce(ctx, r, rg.dones[i])
				return
			}
		}
		p.missed()
	}
	p.cl.Produce(ctx, r, func(r *kgo.Record, err error) { p.outcome(seq, ctx, promise, r, err) })
}

// carried is the kgo promise of carrier idx of rg. It frees the carrier
// before calling anything, so that the carrier may be reused at once.
func (p *Producer) carried(rg *carrierRing, idx uint64, r *kgo.Record, err error) {
	c := &rg.slots[idx]
	st, promise := c.state.Load(), c.promise
	c.promise = nil
	c.state.Store(st &^ 1)
	p.outcome((st>>1)<<rg.shift|idx, r.Context, promise, r, err)
}

// outcome takes a record's outcome from kgo on the no-failure path.
func (p *Producer) outcome(seq uint64, ctx context.Context, promise func(*kgo.Record, error), r *kgo.Record, err error) {
	if err == nil {
		p.done(promise, r, nil)
		return
	}
	p.result(&pending{seq: seq, ctx: ctx, r: r, promise: promise}, r, err)
}

// missed counts a record that found no free carrier (see resize).
func (p *Producer) missed() {
	if rg := p.ring.Load(); p.misses.Add(1) >= uint64(len(rg.slots)/4) {
		p.resize(rg, true)
	}
}

// resize grows rg once its misses reach a quarter of its size, if half as
// many records as it has carriers are in flight (else a few slow records
// missed, which a bigger ring would keep, not avoid): to twice its size, or
// twice that many if more, at most maxCarriers. Called at each lap of rg (a
// record numbered a multiple of its size takes a carrier), it shrinks rg after
// shrinkLaps laps in a row with fewer in flight than an eighth of its size:
// to four times the most of those, at least minCarriers.
func (p *Producer) resize(rg *carrierRing, grow bool) {
	size := len(rg.slots)
	if grow && size >= maxCarriers || !grow && size <= minCarriers || !p.resizing.CompareAndSwap(false, true) {
		return
	}
	defer p.resizing.Store(false)
	out := p.out.Load() // before in: no record counted out is missing from in
	n, want := int(min(p.in.Load()-out, maxCarriers)), 0
	switch {
	case p.ring.Load() != rg: // another call resized it meanwhile
	case grow:
		p.misses.Store(0)
		if n >= size/2 {
			want = max(2*size, 2*n)
		}
	case n >= size/8:
		rg.low, rg.peak = 0, 0
	default:
		if rg.low, rg.peak = rg.low+1, max(rg.peak, n); rg.low == shrinkLaps {
			want = max(4*rg.peak, minCarriers)
		}
	}
	if want > 0 {
		p.ring.Store(p.newCarrierRing(min(1<<bits.Len(uint(want-1)), maxCarriers)))
	}
}
