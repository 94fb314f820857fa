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

// newCarriers returns the carriers of a Producer, whose promises call ok
// with the record's promise, or failed with a copy of its pending state (the
// carrier is freed first).
func newCarriers(ok func(func(*kgo.Record, error), *kgo.Record, error), failed func(*pending, *kgo.Record, error)) *carriers {
	cs := &carriers{}
	cs.pool.New = func() any {
		c := new(carrier)
		c.done = func(r *kgo.Record, err error) {
			if err == nil {
				promise := c.pd.promise
				c.pd = pending{}
				cs.pool.Put(c)
				ok(promise, r, nil)
				return
			}
			pd := new(pending)
			*pd = c.pd
			c.pd = pending{}
			cs.pool.Put(c)
			failed(pd, r, err)
		}
		return c
	}
	return cs
}

func (cs *carriers) claim() *carrier { return cs.pool.Get().(*carrier) }
