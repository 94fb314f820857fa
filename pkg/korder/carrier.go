package korder

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A carrier takes a record to its promise on the no-failure path: its
// promise func is bound once, when the carrier is made, so a record costs no
// closure. Carriers come from a sync.Pool: the pool grows with the records in
// flight and shrinks on its own (the garbage collector empties it), and a
// carrier is never shared: it is claimed by Produce and freed by the promise.
type carrier struct {
	pd   pending
	done func(*kgo.Record, error)
}

type carriers struct {
	pool sync.Pool
}

// newCarriers returns the carriers of a Producer, whose promises call
// finish with the record's pending state (a copy: the carrier is freed
// first).
func newCarriers(finish func(pd *pending, r *kgo.Record, err error)) *carriers {
	cs := &carriers{}
	cs.pool.New = func() any {
		c := new(carrier)
		c.done = func(r *kgo.Record, err error) {
			pd := c.pd
			c.pd = pending{}
			cs.pool.Put(c)
			finish(&pd, r, err)
		}
		return c
	}
	return cs
}

func (cs *carriers) claim() *carrier { return cs.pool.Get().(*carrier) }
