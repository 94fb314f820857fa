// Command kfakeserver runs an in-memory kfake cluster as a separate process on
// loopback, for running franz-go's own kgo test suite against it.
//
// It listens on free ports (or on -ports), writes the broker addresses, comma
// separated, to -addr-file once the cluster is up (so a script can wait for
// the file instead of sleeping), and runs until SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	brokers := flag.Int("brokers", 3, "number of brokers")
	ports := flag.String("ports", "", "comma separated ports (default: free ports)")
	addrFile := flag.String("addr-file", "", "file to write the comma separated broker addresses to once listening")
	flag.Parse()

	opts := []kfake.Opt{
		kfake.NumBrokers(*brokers),
		// Like kfake's own main.go, which upstream's CI runs the kgo suite against.
		kfake.SeedTopics(-1, "foo"),
	}
	if *ports != "" {
		var ps []int
		for p := range strings.SplitSeq(*ports, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil {
				fmt.Fprintf(os.Stderr, "kfakeserver: bad port %q: %v\n", p, err)
				os.Exit(2)
			}
			ps = append(ps, n)
		}
		opts = append(opts, kfake.Ports(ps...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfakeserver: %v\n", err)
		os.Exit(1)
	}
	defer c.Close()

	addrs := strings.Join(c.ListenAddrs(), ",")
	fmt.Println(addrs)
	if *addrFile != "" {
		tmp := *addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(addrs+"\n"), 0o644); err == nil {
			err = os.Rename(tmp, *addrFile) // atomic: readers never see a partial file
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "kfakeserver: writing %s: %v\n", *addrFile, err)
			os.Exit(1)
		}
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	<-sigs
}
