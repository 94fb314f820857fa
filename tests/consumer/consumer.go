// Package consumer is a fixture that builds against the patched franz-go
// through one version-less replace directive to the materialized tree.
package consumer

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ProduceOne produces one record synchronously and returns its error.
func ProduceOne(ctx context.Context, cl *kgo.Client, topic string, value []byte) error {
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: value}).FirstErr()
}
