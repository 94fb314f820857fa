// Package korder is an ordered producer on top of franz-go's kgo: it keeps
// per-partition order across produce failures by carrying out the recovery
// protocol of kgo.FailPartitionOnProduceFailure for you.
//
// With plain kgo, a record that fails (retries or the delivery timeout run
// out, a non-retryable broker error) is reported after records produced
// later may be written; producing it again puts it behind them. With
// kgo.FailPartitionOnProduceFailure, the partition rejects every later record
// until kgo.Client.RecoverProducePartition recovers it, buffering given
// records at its front. kgo hands a Producer a failed partition's failed and
// rejected records (kgo.ProducerOnPartitionFailedRecord); it settles them
// through the policies (see WithPolicies), the earliest first, and hands the
// records to produce again back to kgo with the recovery. Nothing else is
// held: other partitions and topics keep flowing, with any partitioner.
//
// The guarantee: for every partition, the records written are exactly the
// records produced to it, in Produce call order (per producing goroutine, as
// with kgo), minus the records a policy diverted or dropped (and those
// rejected with ErrHeldFull or settled with their own context's error).
// Every promise is called exactly once, with the final outcome.
//
// A failed partition, or a topic kgo fails whole (partition -1, such as an
// unknown topic), has a goroutine while it recovers. Stop stops only it; keys
// are quarantined per topic.
// A healthy partition costs nothing: Produce gives kgo the caller's promise,
// takes no lock and allocates nothing, unless the record has a Context of its
// own, the client flushes manually or is transactional, or a key is
// quarantined or a partition stopped: then the record carries the Producer's
// state, which kgo's produce hooks see as (or under) its Context.
//
// With kgo.MaxBufferedPartitionRecords (10000 unless the kgo options say
// otherwise; keep it well below kgo.MaxBufferedRecords), a partition that a
// broker stalls fails past the bound (the cause wraps kgo.ErrMaxBuffered)
// instead of filling kgo's shared buffer: the Producer holds what kgo
// rejects and produces it again in rounds of the bound, once the stalled
// records are done.
//
// # Hooks and locks
//
// kgo calls a kgo.HookProducePartitionFailed inline, with kgo's partition
// lock held, on whatever goroutine fails the partition. The rule the Producer
// keeps: never hold a korder lock across a kgo call that can call korder's
// hook or hand it a record (Produce, the recoveries, Flush, ...). An
// application's hook must not block, produce or recover; it may call Resume
// and ReleaseQuarantine, which call nothing in kgo.
//
// A topic that does not exist: see the example of WithPolicies.
package korder
