// A stand-in for a user's module that builds against a checkout of this
// repository: one version-less replace directive to upstream/franz-go (the
// portable way, from `make export`, is tested by tests/exportfixture).
module example.com/consumer

go 1.26.0

require (
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
)

replace github.com/twmb/franz-go => ../../upstream/franz-go

// Not part of what a user writes: the project's tests run on the patched
// kfake, which patchset.sh materializes into the tree's pkg/kfake.
replace github.com/twmb/franz-go/pkg/kfake => ../../upstream/franz-go/pkg/kfake
