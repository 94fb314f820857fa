// A stand-in for a user's service: it depends on the patched franz-go and on
// korder only through an export (`make export`), placed beside it as
// ../export. tests/exportfixture/run.sh (make test-export) copies this
// directory and an export into a temporary directory and tests it there,
// with GOWORK=off, so that nothing refers to this checkout.
module example.com/exportfixture

go 1.26.0

require (
	github.com/franz-go-ordered/franz-go-ordered v0.0.0-00010101000000-000000000000
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
)

replace (
	github.com/franz-go-ordered/franz-go-ordered => ../export/franz-go-ordered
	github.com/twmb/franz-go => ../export/franz-go
)
