// Command etcd is the etcd server of the mpijob testbed, built from the etcd
// server module that k8s.io/kubernetes already depends on (so its version is
// the one Kubernetes is tested with).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
