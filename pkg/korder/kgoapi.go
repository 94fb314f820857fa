package korder

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// errPossiblyWritten marks a record that may already be in the log.
// TEMPORARY: kgo.ErrPossiblyWritten once kgo v3 has it.
var errPossiblyWritten = errors.New("kgo: record possibly written")

// recoverPartition is the one recovery call of kgo that the Producer makes.
func recoverPartition(cl *kgo.Client, topic string, partition int32, seen int, promise func(*kgo.Record, error), rs ...*kgo.Record) error {
	return cl.RecoverProducePartition(topic, partition, seen, promise, rs...)
}
