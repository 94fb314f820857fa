// Package korder is an ordered producer on top of franz-go's kgo: it keeps
// per-partition order across produce failures by carrying out the recovery
// protocol of kgo.FailPartitionOnProduceFailure for you.
//
// With plain kgo, a record that fails (retries or the delivery timeout run
// out, a non-retryable broker error) is reported after records produced
// later may be written; producing it again puts it behind them. With
// kgo.FailPartitionOnProduceFailure, the partition rejects every later record
// until kgo.Client.RecoverProducePartition recovers it, buffering given
// records at its front in one step. A Producer does the rest:
//
//   - It collects a failed partition's failed and rejected records from
//     their promises, in Produce order. Nothing else is held: the topic's
//     other partitions, and other topics, keep flowing, with any partitioner.
//   - It settles them through the policies (see WithPolicies), the earliest
//     first, and hands the records to produce again back to kgo with the
//     recovery.
//
// The guarantee: for every partition, the records written are exactly the
// records produced to it, in Produce call order (per producing goroutine, as
// with kgo), minus the records a policy diverted or dropped (and those
// rejected with ErrHeldFull or settled with their own context's error).
// Every promise is called exactly once, with the final outcome.
//
// # Partitions and topics
//
// Each failed partition has a state machine with its own lock and one worker
// goroutine while it recovers; a healthy partition costs nothing. A failure
// kgo reports for a whole topic (partition -1: its partitions were not known,
// for example an unknown topic) has one too: its recovery partitions the
// records, and a partition that one of them fails recovers on its own. Stop
// stops only the failed partition (or topic) until Resume. Keys are
// quarantined per topic.
//
// With kgo.MaxBufferedPartitionRecords (10000 unless the kgo options say
// otherwise; keep it well below kgo.MaxBufferedRecords), a partition that a
// broker stalls fails past the bound (the cause wraps kgo.ErrMaxBuffered)
// instead of filling kgo's shared buffer: the Producer holds what kgo
// rejects and produces it again in rounds of the bound once the partition's
// buffered records are written. MaxHeld and MaxHeldBytes bound what it holds.
//
// # Hooks and locks
//
// kgo calls a kgo.HookProducePartitionFailed inline, with kgo's partition
// lock held, on whatever goroutine fails the partition. The Producer's own
// hook only counts (Stats.Failures). The rule the Producer keeps: never hold
// a korder lock across a kgo call that can call korder's hook (Produce, the
// recoveries, Flush, ...). An application's hook keeps kgo's rule (it must
// not block, produce or recover); it may call Resume and ReleaseQuarantine,
// which call nothing in kgo.
//
// # Topics that do not exist
//
// kgo fails a topic that does not exist (partition -1) once five metadata
// answers in a row say it is unknown (kgo.UnknownTopicRetries, default 4),
// about 1 s the first time; later attempts ask at most once per
// kgo.MetadataMinAge (default 5 s). With the default policies a record to
// such a topic is dropped (ErrDropped, UNKNOWN_TOPIC_OR_PARTITION) about a
// minute after Produce (62 s against kfake); a topic created meanwhile is
// used. To settle sooner, give kgo kgo.UnknownTopicRetries(0) and
// kgo.MetadataMinAge(250*time.Millisecond), and let the policies wait: with
// WithPolicies(Retry(3, time.Second), Stop()), the record is stopped after
// 3 s, and a topic created 1.5 s after the Produce gets it after 2 s. With
// UnknownTopicRetries(0) the policies also handle the UNKNOWN_TOPIC_OR_PARTITION
// answers brokers give for a moment after a topic is created.
//
// # Cost
//
// While nothing is wrong, Produce takes no lock: two atomic operations and
// one closure as kgo's promise (32 bytes, the only allocation). Flush waits
// for kgo's Flush and for the records the Producer holds. With
// kgo.ManualFlushing or a transactional ID, each record costs an atomic add
// more on each side.
package korder
