// A kube-scheduler (the testbed's Kubernetes version) with the scheduler-plugins Coscheduling plugin
// registered out of tree, as scheduler-plugins documents for custom schedulers. Only this plugin is
// linked in: the testbed needs gang scheduling, not the rest of the collection.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	// Registers the plugins' argument types (CoschedulingArgs) with the scheduler's configuration scheme.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(coscheduling.Name, coscheduling.New))
	os.Exit(cli.Run(command))
}
