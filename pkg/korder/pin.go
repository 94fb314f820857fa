package korder

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Pinned partitions.
//
// With kgo's default partitioner, a keyed record's partition is a hash of
// its key over the topic's partition count, which kgo knows and the
// Producer does not. To hold a slow partition's records itself (see
// throttle.go) the Producer must know a record's partition before kgo
// partitions it, and be sure that kgo puts the record there: a record it
// held as partition P's must not land on another partition, ahead of that
// partition's earlier records, or the other way round.
//
// So the Producer gives the client a partitioner of its own, which wraps
// kgo's default one (kgo.UniformBytesPartitioner(64<<10, true, true, nil))
// and behaves exactly like it, with one addition: a record whose Partition
// field the Producer set to pinnedPartition(p) goes to partition p. The
// wrapper also records, per topic, the partition count kgo partitions keyed
// records over (the n kgo passes it). The Producer hashes a keyed record's
// key over that count itself, as the wrapped partitioner would, and pins
// the record to the result: kgo puts it there even if the count changed
// meanwhile (partitions are only ever added, so the partition exists).
//
// If the client's options give a partitioner of their own
// (kgo.RecordPartitioner), it replaces the wrapper, and the Producer pins
// nothing (slow partitions are not held; see throttle.go).

// pinnedPartition encodes partition p in a record's Partition field for
// pinPartitioner: -2 - p, which no partitioner reads as a partition.
func pinnedPartition(p int32) int32 { return -2 - p }

// unpin restores a record's Partition field that a failure left pinned
// (kgo failed it before partitioning it): -1, as kgo leaves a record it did
// not partition.
func unpin(r *kgo.Record) {
	if r.Partition <= -2 {
		r.Partition = -1
	}
}

// pinPartitioner is the Producer's partitioner; see above.
type pinPartitioner struct {
	inner kgo.Partitioner
	keyed kgo.TopicBackupPartitioner // an instance of inner for keyedPartition

	mu     sync.Mutex
	counts map[string]*atomic.Int32
}

func newPinPartitioner() *pinPartitioner {
	inner := kgo.UniformBytesPartitioner(64<<10, true, true, nil)
	return &pinPartitioner{
		inner:  inner,
		keyed:  inner.ForTopic("").(kgo.TopicBackupPartitioner),
		counts: make(map[string]*atomic.Int32),
	}
}

// count returns the cell where the partition count of topic is kept: 0
// until kgo partitioned a keyed record of the topic.
func (pp *pinPartitioner) count(topic string) *atomic.Int32 {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	c := pp.counts[topic]
	if c == nil {
		c = new(atomic.Int32)
		pp.counts[topic] = c
	}
	return c
}

func (pp *pinPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &pinTopicPartitioner{
		inner: pp.inner.ForTopic(topic).(kgo.TopicBackupPartitioner),
		n:     pp.count(topic),
	}
}

// pinTopicPartitioner is a pinPartitioner's topic partitioner: kgo calls it
// under the topic's partitioner lock.
type pinTopicPartitioner struct {
	inner kgo.TopicBackupPartitioner
	n     *atomic.Int32
}

func (tp *pinTopicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return r.Partition <= -2 || tp.inner.RequiresConsistency(r)
}

func (tp *pinTopicPartitioner) Partition(r *kgo.Record, n int) int {
	return tp.PartitionByBackup(r, n, nil)
}

func (tp *pinTopicPartitioner) PartitionByBackup(r *kgo.Record, n int, backup kgo.TopicBackupIter) int {
	if r.Partition <= -2 {
		// Pinned: a keyed record, so n is the partition count.
		tp.learn(n)
		if p := int(-2 - r.Partition); p < n {
			return p
		}
		return tp.inner.PartitionByBackup(r, n, backup) // the topic shrank (recreated): hash it anew
	}
	if tp.inner.RequiresConsistency(r) {
		tp.learn(n)
	}
	return tp.inner.PartitionByBackup(r, n, backup)
}

func (tp *pinTopicPartitioner) learn(n int) {
	if int32(n) != tp.n.Load() {
		tp.n.Store(int32(n))
	}
}

// keyedPartition returns the partition kgo's default partitioner puts a
// keyed record in, given the topic's partition count n, and whether it can
// tell: the record has a key and n is known. It asks the wrapped
// partitioner, whose keyed path is a pure hash of the key (safe to call
// concurrently).
func (pp *pinPartitioner) keyedPartition(r *kgo.Record, n int32) (int32, bool) {
	if r.Key == nil || n <= 0 {
		return 0, false
	}
	p := pp.keyed.PartitionByBackup(r, int(n), nil)
	if p < 0 || p >= int(n) {
		return 0, false
	}
	return int32(p), true
}
