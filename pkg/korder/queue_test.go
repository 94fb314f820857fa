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
