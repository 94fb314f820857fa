package korder

import (
	"slices"
	"testing"
)

// The queue keeps Produce order: records inserted out of order, a round
// taken from the front whose failed records come back (insertFront, in one
// step into the room the round left), and a round's records that come back
// after a record with an earlier sequence was inserted (one by one).
func TestQueueOrder(t *testing.T) {
	var q queue
	seqs := func() []uint64 {
		var s []uint64
		for _, pd := range q.rs {
			s = append(s, pd.seq)
		}
		return s
	}
	for _, seq := range []uint64{3, 1, 2, 5, 4, 6} {
		q.insert(&pending{seq: seq})
	}
	if got := seqs(); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("after inserting: %v", got)
	}
	round := q.take(0, 3)
	q.insert(&pending{seq: 7})
	base := &q.base[0]
	q.insertFront(round[1:]) // 1 was written; 2 and 3 failed
	if got := seqs(); !slices.Equal(got, []uint64{2, 3, 4, 5, 6, 7}) {
		t.Fatalf("after a round: %v", got)
	}
	if &q.base[0] != base {
		t.Error("the round's records did not go back into the room it left")
	}
	round = q.take(0, 2)
	q.insert(&pending{seq: 1}) // a late record from before the round
	q.insertFront(round)
	if got := seqs(); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("after a round behind a late record: %v", got)
	}
	q.insertFront(nil)
	if q.take(0, q.len()); q.len() != 0 || q.base != nil {
		t.Error("an emptied queue keeps its array")
	}
}

// gen changes whenever the records at the front may differ: not for a record
// inserted last.
func TestQueueGen(t *testing.T) {
	var q queue
	step := func(name string, f func(), changes bool) {
		t.Helper()
		gen := q.gen
		f()
		if (q.gen != gen) != changes {
			t.Errorf("%s: gen changed %v, expected %v", name, q.gen != gen, changes)
		}
	}
	a, b, c, d := &pending{seq: 1}, &pending{seq: 2}, &pending{seq: 3}, &pending{seq: 4}
	step("insert into an empty queue", func() { q.insert(b) }, false)
	step("insert last", func() { q.insert(d) }, false)
	step("insert in the middle", func() { q.insert(c) }, true)
	var round []*pending
	step("take", func() { round = q.take(0, 1) }, true)
	step("insertFront", func() { q.insertFront(round) }, true)
	step("insertFront of nothing", func() { q.insertFront(nil) }, false)
	step("insert first", func() { q.insert(a) }, true)
	step("remove", func() { q.remove(c) }, true)
	step("remove of a record not kept", func() { q.remove(c) }, false)
}
