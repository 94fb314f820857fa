package korder

import "github.com/twmb/franz-go/pkg/kgo"

// PinningPartitioner is the partitioner NewProducer gives the client
// when kopts give none (kgo's default, which the Producer can pin; see
// pin.go), for tests whose helpers give a partitioner otherwise.
func PinningPartitioner() kgo.Opt { return kgo.RecordPartitioner(newPinPartitioner()) }
