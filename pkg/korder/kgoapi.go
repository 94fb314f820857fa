package korder

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TEMPORARY: stands in for kgo v3's RecoverProducePartition and
// ErrPossiblyWritten until they land.
var errPossiblyWritten = errors.New("kgo v3 missing")

func recoverPartition(cl *kgo.Client, topic string, partition int32, seen int, promise func(*kgo.Record, error), rs ...*kgo.Record) error {
	return errors.New("kgo v3 missing")
}
