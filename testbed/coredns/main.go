// CoreDNS for the testbed's real nodes, built from its Go module with only the plugins the standard
// (kubeadm) Corefile uses: a fraction of upstream's full plugin set (no cloud SDKs), so the cold build is
// minutes shorter. The directive order stays upstream's (core/dnsserver's table); unregistered plugins are
// simply never set up.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
