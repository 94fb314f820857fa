package korder

import (
	"cmp"
	"context"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pending is a record produced through the Producer.
type pending struct {
	context.Context // the record's own Context, while pd is it (mark)

	seq      uint64 // the order it first came back in, over the whole Producer: a partition's Produce order
	produced uint64 // off the no-failure path: its number in Produce order (p.seq); else 0 (see Resume)
	ctx      context.Context
	r        *kgo.Record
	promise  func(*kgo.Record, error)
	err      error  // the last error kgo failed the record with
	rejected bool   // err is kgo's failure itself: the record was rejected, not failed
	attempts int    // Retry attempts
	round    uint64 // the recovery round it last came back failed from
}

type ownKey struct{ r *kgo.Record }

// Value finds pd through a Context that wraps it, as a hook may (kotel does).
func (pd *pending) Value(key any) any {
	if key == (ownKey{pd.r}) {
		return pd
	}
	return pd.Context.Value(key)
}

// ownOf returns the pending of a record the Producer gave kgo (mark), if any.
func ownOf(r *kgo.Record) *pending {
	pd, _ := cmp.Or(r.Context, context.Background()).Value(ownKey{r}).(*pending)
	return pd
}

// mark makes pd the record's Context while kgo has it (handOver knows it).
func (pd *pending) mark() {
	if pd.Context == nil { // set once: kgo may still watch pd after a promise
		pd.Context = cmp.Or(pd.r.Context, pd.ctx)
	}
	pd.r.Context = pd
}

// unmark gives the record its own Context back, before its promise runs.
func (pd *pending) unmark() {
	if pd.r.Context == context.Context(pd) {
		pd.r.Context = pd.Context
	}
}

// size is what a record counts for against MaxHeldBytes.
func (pd *pending) size() int64 {
	n := len(pd.r.Key) + len(pd.r.Value)
	for _, h := range pd.r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// canceled returns the error of the record's own context, if it is done.
func (pd *pending) canceled() error {
	if err := cmp.Or(pd.ctx, context.Background()).Err(); err != nil {
		return err
	}
	return cmp.Or(pd.r.Context, context.Background()).Err()
}

// queue holds a partition's kept records in seq order.
type queue struct {
	rs   []*pending // base[off:]
	base []*pending // the room a round leaves at the front takes its failed records back (insertFront)
	off  int
	gen  uint64 // changes when records are taken, or one is inserted before the last
}

func (q *queue) len() int { return len(q.rs) }

// head returns how many of the first n records there are (n 0: all).
func (q *queue) head(n int) int { return min(cmp.Or(max(n, 0), len(q.rs)), len(q.rs)) }

func (q *queue) insert(pd *pending) {
	i := len(q.rs)
	if i > 0 && q.rs[i-1].seq > pd.seq {
		i = sort.Search(len(q.rs), func(j int) bool { return q.rs[j].seq > pd.seq })
		q.gen++
	}
	q.base = slices.Insert(q.base, q.off+i, pd)
	q.rs = q.base[q.off:]
}

// insertFront inserts rs, in order: in one step if they all go first.
func (q *queue) insertFront(rs []*pending) {
	if len(rs) == 0 || len(q.rs) > 0 && rs[len(rs)-1].seq > q.rs[0].seq {
		for _, pd := range rs {
			q.insert(pd)
		}
		return
	}
	q.gen++
	if q.off < len(rs) {
		q.base, q.off = slices.Concat(rs, q.rs), 0
	} else {
		q.off -= len(rs)
		copy(q.base[q.off:], rs)
	}
	q.rs = q.base[q.off:]
}

// remove removes pd, wherever it is.
func (q *queue) remove(pd *pending) bool {
	i := slices.Index(q.rs, pd)
	if i >= 0 {
		q.take(i, i+1)
	}
	return i >= 0
}

// take removes and returns rs[i:j]; an empty queue drops its array.
func (q *queue) take(i, j int) []*pending {
	q.gen++
	out := append([]*pending(nil), q.rs[i:j]...)
	if i == 0 {
		clear(q.rs[:j])
		q.off += j
	} else {
		q.base = append(q.base[:q.off+i], q.base[q.off+j:]...)
	}
	q.rs = q.base[q.off:]
	if len(q.rs) == 0 {
		q.rs, q.base, q.off = nil, nil, 0
	}
	return out
}
