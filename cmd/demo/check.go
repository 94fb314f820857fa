package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// result is one row of the table.
type result struct {
	mode                string
	produced            int
	failed              int    // records kgo failed at least once
	failedRejectedOnly  int    // of which every failure was a rejection by a failed partition
	writtenAfterFailure int    // see the footnote printed under the table
	outOfOrderKeys      int    // keys whose sequence goes backwards in the log
	outOfOrderSample    string // one instance, for the note under the table
	lost                int    // in no log, and the application was never told
	givenUp             int    // in no log, and the application knows
	givenUpCollateral   int    // of which not poison, failing only with INVALID_RECORD
	deadLettered        int    // in the dead-letter topic (and not in the demo topic)
	duplicates          int    // extra copies of a record in the demo topic
}

// readBack reads every partition of the demo and dead-letter topics from the
// start, with a client of its own, up to the high watermarks.
func readBack(ctx context.Context, c *kfake.Cluster, partitions int32) (logs [][]*kgo.Record, dlq []*kgo.Record, err error) {
	logs = make([][]*kgo.Record, partitions)
	want := make(map[string]map[int32]int64)
	offsets := make(map[string]map[int32]kgo.Offset)
	add := func(tp string, p int32) {
		info := c.PartitionInfo(tp, p)
		if info == nil || info.HighWatermark == 0 {
			return
		}
		if want[tp] == nil {
			want[tp], offsets[tp] = make(map[int32]int64), make(map[int32]kgo.Offset)
		}
		want[tp][p] = info.HighWatermark
		offsets[tp][p] = kgo.NewOffset().AtStart()
	}
	for p := range partitions {
		add(topic, p)
	}
	add(dlqTopic, 0)
	if len(want) == 0 {
		return logs, nil, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(offsets),
		kgo.FetchMaxWait(50*time.Millisecond),
	)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	left := 0
	for _, ps := range want {
		left += len(ps)
	}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("reading the logs back: %w", ctx.Err())
		}
		for _, fe := range fs.Errors() {
			return nil, nil, fmt.Errorf("reading %s/%d back: %w", fe.Topic, fe.Partition, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == dlqTopic {
				dlq = append(dlq, r)
			} else {
				logs[r.Partition] = append(logs[r.Partition], r)
			}
			if hw, ok := want[r.Topic][r.Partition]; ok && r.Offset >= hw-1 {
				delete(want[r.Topic], r.Partition)
				left--
			}
		})
	}
	return logs, dlq, nil
}

// evaluate computes a row from the logs and what the tracker saw.
func evaluate(w *workload, recs []recState, logs [][]*kgo.Record, dlq []*kgo.Record) (result, error) {
	res := result{produced: w.cfg.records}
	n := w.cfg.records

	// Where each record first appears in the demo topic; per-key order.
	offset := make([]int64, n)
	for i := range offset {
		offset[i] = -1
	}
	backwards := make(map[string]bool)
	for p, log := range logs {
		maxSeq := make(map[string]int)
		maxOff := make(map[string]int64)
		for _, r := range log {
			id, key, seq, parsed := parse(r.Value)
			if !parsed || id < 0 || id >= n || w.part[id] != int32(p) || string(w.key[id]) != key {
				return res, fmt.Errorf("partition %d offset %d holds %q, not a record of the workload", p, r.Offset, r.Value)
			}
			if offset[id] >= 0 {
				res.duplicates++
			} else {
				offset[id] = r.Offset
			}
			if m, seen := maxSeq[key]; seen && seq < m {
				if res.outOfOrderSample == "" {
					res.outOfOrderSample = fmt.Sprintf("key %s: seq %d is at offset %d of partition %d, after seq %d at offset %d",
						key, seq, r.Offset, p, m, maxOff[key])
				}
				backwards[key] = true
			} else if !seen || seq > m {
				maxSeq[key], maxOff[key] = seq, r.Offset
			}
		}
	}
	res.outOfOrderKeys = len(backwards)

	inDLQ := make([]bool, n)
	for _, r := range dlq {
		if id, _, _, parsed := parse(r.Value); parsed && id >= 0 && id < n {
			inDLQ[id] = true
		}
	}

	for id, rs := range recs {
		if rs.kgoFailures > 0 {
			res.failed++
			if rs.rejected == rs.kgoFailures {
				res.failedRejectedOnly++
			}
		}
		switch {
		case offset[id] >= 0:
		case inDLQ[id]:
			res.deadLettered++
		case rs.final == gaveUp || rs.final == deadLettered:
			res.givenUp++ // (deadLettered here: reported diverted, yet not in the dead-letter topic)
			if !w.poison[id] && rs.kgoFailures > 0 && rs.invalid == rs.kgoFailures {
				res.givenUpCollateral++
			}
		default:
			res.lost++
		}
	}

	// Written after a failure: a record Y of partition p counts if a record
	// X of p produced before Y had failed (kgo failed it at least once) and
	// was not yet settled when Y was written: X is later than Y in the log,
	// or X never reached the log and the application settled it (gave up,
	// dead-lettered) only after kgo reported Y written, or never did.
	for p := range w.cfg.partitions {
		var (
			maxFailedOffset int64 = -1
			maxSettle       time.Time
			unsettled       bool
		)
		for id := range n { // ids are produce order
			if w.part[id] != p {
				continue
			}
			rs := recs[id]
			if offset[id] >= 0 && (offset[id] < maxFailedOffset || unsettled || rs.acked && rs.ackAt.Before(maxSettle)) {
				res.writtenAfterFailure++
			}
			if rs.kgoFailures == 0 {
				continue
			}
			switch {
			case offset[id] >= 0:
				maxFailedOffset = max(maxFailedOffset, offset[id])
			case rs.final != pending:
				if rs.settledAt.After(maxSettle) {
					maxSettle = rs.settledAt
				}
			default:
				unsettled = true
			}
		}
	}
	return res, nil
}
