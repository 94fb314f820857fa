package korder

import "github.com/twmb/franz-go/pkg/kgo"

// errPossiblyWritten marks a record that may already be in the log.
var errPossiblyWritten = kgo.ErrPossiblyWritten

// recoverPartition is the one recovery call of kgo that the Producer makes:
// it recovers the partition and buffers rs at its front in one step, or with
// keep buffers them and keeps the partition failed.
func recoverPartition(cl *kgo.Client, topic string, partition int32, seen int, keep bool, promise func(*kgo.Record, error), rs ...*kgo.Record) error {
	return cl.RecoverProducePartition(topic, partition, seen, keep, promise, rs...)
}
