// Package korder is an ordered producer on top of franz-go's kgo: it keeps
// per-partition order across produce failures by carrying out the recovery
// protocol of kgo.FailPartitionOnProduceFailure for you.
//
// With plain kgo, a record that fails (retries or the delivery timeout run
// out, a non-retryable broker error) is reported asynchronously, after
// records produced later may already be written; producing it again puts it
// behind them. kgo.FailPartitionOnProduceFailure stops the damage: the
// partition rejects every later record until it is recovered. Every record
// the failure failed or rejected is promised with an error carrying the
// failure (a *kgo.ErrProducePartitionFailed, the value kgo's hook gets), and
// kgo.Client.RecoverProducePartition recovers the partition and buffers given
// records at its front in one step, refused (kgo.ErrRecoveryPending) until
// every one of those promises has returned. A Producer does the rest:
//
//   - It collects a failed partition's failed and rejected records from
//     their promises, grouped by the failure they carry, in Produce order.
//     Nothing else is held: kgo rejects the partition's new records, and
//     the topic's other partitions, and other topics, keep flowing, with any
//     partitioner.
//   - It settles them through the policies, the earliest first: Retry,
//     Isolate, DeadLetter, Drop or Stop. The default, Retry(3,
//     100*time.Millisecond) then Drop, is what a kgo user expects: a record
//     that keeps failing gets its error, and the partition goes on; only
//     Stop stops it.
//   - It hands the records to produce again back to kgo with
//     RecoverProducePartition; if kgo refuses because promises have not all
//     returned, it calls again a little later. A Retry attempt sends the
//     failed batch first, keeping the partition failed
//     (RecoverProducePartitionKeepFailed, whose new failure rejects the
//     records produced meanwhile), and the rest once the batch is written.
//
// The guarantee: for every partition, the records written are exactly the
// records produced to it, in Produce call order (per producing goroutine, as
// with kgo), minus the records a policy diverted or dropped (and those
// rejected with ErrHeldFull or settled with their own context's error).
// Every promise is called exactly once, with the final outcome.
//
// # Partitions and topics
//
// Each failed partition has a state machine of its own, with its own lock
// and one worker goroutine while it recovers, which is the only caller of
// kgo's recovery for it; a healthy partition costs nothing, and a recovered
// one is forgotten. A failure kgo reports for a whole topic (partition -1:
// the topic's partitions were not known, for example an unknown topic) has a
// state machine too: kgo rejects the topic's records until it is recovered,
// and the recovery partitions them; a partition that one of them fails
// recovers on its own (kgo keeps each partition in order, whichever recovers
// first). Stop stops only the failed partition (or topic): kgo keeps it
// failed, its records fail with ErrStopped, and Resume resumes it. Keys are
// quarantined per topic.
//
// With kgo.MaxBufferedPartitionRecords (10000 unless the kgo options say
// otherwise; keep it well below kgo.MaxBufferedRecords), a partition that a
// broker stalls fails past the bound (kgo's hook is called, and the cause
// wraps kgo.ErrMaxBuffered) instead of filling kgo's shared buffer: the
// Producer holds the records kgo rejects, past the policies, and produces
// them again in rounds of the bound once the partition's buffered records
// are written.
//
// MaxHeld and MaxHeldBytes bound what the Producer keeps for each failed
// partition: the records it holds, and those it produced again that are not
// yet written. At the bound, a record that comes back failed or rejected for
// the partition fails with ErrHeldFull instead of being kept.
//
// Produce never waits for the Producer (only kgo's own bounds, such as
// kgo.MaxBufferedRecords, block it): a record's partition is known only once
// kgo has partitioned it, so waiting, for room or for a recovery, would hold
// up the topic's healthy partitions too. A failed partition that producers
// keep rejecting faster than kgo's promises return is recovered once they
// all have, which a steady stream of rejections may delay. Retry's first
// batch and Isolate's halves are produced with the partition kept failed, so
// nothing else waits for them.
//
// # Hooks and locks
//
// kgo calls a kgo.HookProducePartitionFailed inline, where the partition
// fails, with kgo's partition lock held, on whatever goroutine fails it: one
// of kgo's, a goroutine calling Produce, or a Producer's worker inside a
// recovery. The Producer's own hook only counts (Stats.Failures): it never
// blocks and takes no lock. The rule the Producer keeps: never hold a korder
// lock across a kgo call that can call korder's hook (Produce, the
// recoveries, Flush, ...), since the hook, or an application's hook calling
// the Producer, would wait for it under kgo's lock. An application's hook
// keeps kgo's rule: it must not block, produce or recover. Resume and
// ReleaseQuarantine take only the Producer's locks and call nothing in kgo:
// they may be called from an application's hook.
//
// # Topics that do not exist
//
// A record produced to a topic that does not exist (on a cluster that does
// not create topics automatically) is not written: with the default
// options, its promise gets an error wrapping ErrDropped and
// UNKNOWN_TOPIC_OR_PARTITION about a minute after Produce (62.0 s, against
// kfake). kgo fails the whole topic (partition -1) once five metadata
// answers in a row say the topic is unknown (kgo.UnknownTopicRetries,
// default 4): about 1 s the first time, its metadata requests 250 ms apart.
// The default policies retry three times; each attempt waits for kgo to give
// up again, and kgo now asks at most once per kgo.MetadataMinAge (default
// 5 s), so an attempt takes 10 to 25 s. Drop then drops the record, and
// each later record goes the same way (one produced once the first was
// dropped was dropped after 100 s). A topic created meanwhile is used:
// created 1.5 s after the Produce, the record is written after 1.5 s.
//
// To settle sooner with the same outcomes, give kgo
// kgo.UnknownTopicRetries(0) (kgo fails an attempt at the first unknown-topic
// answer, so the policies alone decide how long to wait) and
// kgo.MetadataMinAge(250*time.Millisecond) (kgo asks again sooner), and let
// the policies wait for the topic: with WithPolicies(Retry(3, time.Second),
// Stop()), the record gets ErrStopped after 3.0 s, and a topic created 1.5 s
// after the Produce gets it after 2.0 s. kgo.UnknownTopicRetries(0) with the
// default Retry(3, 100*time.Millisecond) drops the record after 0.8 s (the
// next one after 1.0 s), too soon for a topic being created.
// kgo.UnknownTopicRetries also counts produce answers
// UNKNOWN_TOPIC_OR_PARTITION, which brokers can give for a moment after a
// topic is created or while a partition moves: with 0, the policies handle
// those too. A lower MetadataMinAge means more metadata requests
// while something is missing.
//
// # Contexts
//
// A record whose own context (the one given to Produce, or its Context) is
// done when its turn comes is settled alone with its context's error, as raw
// kgo would: it is not produced again, diverted, dropped or counted toward
// Stop.
//
// # Records possibly written
//
// A record that fails with kgo.ErrPossiblyWritten may already be in the log.
// Retry does not produce it again, unless RetryPossiblyWritten; the next
// policy settles it.
//
// # Cost
//
// While nothing is wrong, Produce takes no lock: it numbers the record (an
// atomic add), checks that nothing takes it off that path (an atomic load),
// and gives the record to kgo with one closure as its promise, 32 bytes, the
// only allocation. On kgo's promise goroutine the closure calls the promise.
// Flush waits for kgo's Flush and for the records the Producer holds, which
// it counts off that path: records kgo failed, and records kgo may fail
// before buffering them, which kgo's Flush does not count (no topic, larger
// than kgo.MaxBufferedBytes, and every record with kgo.ManualFlushing or a
// transactional ID: an atomic add more on each side, and a larger closure).
package korder
