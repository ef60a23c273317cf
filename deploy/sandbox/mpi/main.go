// Command mpi-controller runs the MPIJob controller of github.com/kubeflow/mpi-operator (the
// library, pinned by this wrapper module) for the atoll sandbox.
//
// The upstream command is not used: it serves /healthz on :8080 on every interface, hard-coded
// (still so in v0.8.2), which the sandbox forbids (loopback only) and which would collide
// between two sandboxes.
// This main opens no port at all: no health server, no metrics, no leader election. Once its
// informer caches are synced it writes --ready-file, which is what the sandbox waits for.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kubeflow/mpi-operator/cmd/mpi-operator/app/options"
	mpiclient "github.com/kubeflow/mpi-operator/pkg/client/clientset/versioned"
	mpiinformers "github.com/kubeflow/mpi-operator/pkg/client/informers/externalversions"
	"github.com/kubeflow/mpi-operator/pkg/controller"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server (required)")
	readyFile := flag.String("ready-file", "", "file written once the informer caches are synced")
	workers := flag.Int("threadiness", 2, "MPIJobs reconciled in parallel")
	qps := flag.Float64("kube-api-qps", 50, "client QPS to the API server")
	burst := flag.Int("kube-api-burst", 100, "client burst to the API server")
	// The library's options package registers klog's flags when it is imported.
	flag.Parse()
	if err := run(*kubeconfig, *readyFile, *workers, float32(*qps), *burst); err != nil {
		fmt.Fprintln(os.Stderr, "mpi-controller:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, readyFile string, workers int, qps float32, burst int) error {
	if kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	kube, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, "mpi-operator"))
	if err != nil {
		return err
	}
	mpi, err := mpiclient.NewForConfig(rest.AddUserAgent(cfg, "mpi-operator"))
	if err != nil {
		return err
	}

	stop := make(chan struct{})
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-signals
		close(stop)
		<-signals
		os.Exit(1)
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()

	core := kubeinformers.NewSharedInformerFactory(kube, 0)
	jobs := mpiinformers.NewSharedInformerFactory(mpi, 0)
	// Every namespace; no gang scheduler (atoll is the gang admission), so no Volcano or
	// scheduler-plugins client. The queue's rate limits are the upstream flags' defaults.
	opt := &options.ServerOption{
		Namespace:           metav1.NamespaceAll,
		ControllerRateLimit: 10,
		ControllerBurst:     100,
	}
	ctrl, err := controller.NewMPIJobController(
		ctx, kube, mpi, nil, nil,
		core.Core().V1().ConfigMaps(),
		core.Core().V1().Secrets(),
		core.Core().V1().Services(),
		core.Batch().V1().Jobs(),
		core.Core().V1().Pods(),
		core.Scheduling().V1().PriorityClasses(),
		jobs.Kubeflow().V2beta1().MPIJobs(),
		opt)
	if err != nil {
		return fmt.Errorf("creating the MPIJob controller: %w", err)
	}
	core.Start(stop)
	jobs.Start(stop)
	for informer, ok := range core.WaitForCacheSync(stop) {
		if !ok {
			return fmt.Errorf("informer %v did not sync", informer)
		}
	}
	for informer, ok := range jobs.WaitForCacheSync(stop) {
		if !ok {
			return fmt.Errorf("informer %v did not sync", informer)
		}
	}
	if readyFile != "" {
		if err := os.MkdirAll(filepath.Dir(readyFile), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(readyFile, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	}
	klog.Info("mpi-controller: caches synced, reconciling MPIJobs")
	return ctrl.Run(workers, stop)
}
