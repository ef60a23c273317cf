// Command trainer-controller runs the Kubeflow Trainer v2 controllers and webhooks of
// github.com/kubeflow/trainer/v2 (the library, pinned by this wrapper module) for the atoll
// sandbox.
//
// The upstream command is not used: its webhook server listens on every interface (it sets a
// port, never a host) and its certificates come from a rotator that keeps them in a Secret of
// the kubeflow-system namespace behind a Service, none of which the sandbox has. This main
// reads the Configuration file the sandbox writes for every controller (webhook host, port
// and certificate folder, health probe address; metrics and leader election are off), serves
// only on those loopback addresses with the sandbox's certificates, and sets up the same
// controllers and webhooks as the upstream command.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"

	apiruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlpkg "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	"sigs.k8s.io/yaml"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/kubeflow/trainer/v2/pkg/controller"
	runtimecore "github.com/kubeflow/trainer/v2/pkg/runtime/core"
	"github.com/kubeflow/trainer/v2/pkg/webhooks"
)

// config is the part of the sandbox's controller Configuration file this main reads.
type config struct {
	Webhook struct {
		Host    string `json:"host"`
		Port    int    `json:"port"`
		CertDir string `json:"certDir"`
	} `json:"webhook"`
	Health struct {
		HealthProbeBindAddress string `json:"healthProbeBindAddress"`
	} `json:"health"`
}

func main() {
	// --kubeconfig is controller-runtime's own flag (registered by its config package).
	configFile := flag.String("config", "", "the sandbox's Configuration file (required)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if err := run(*configFile); err != nil {
		fmt.Fprintln(os.Stderr, "trainer-controller:", err)
		os.Exit(1)
	}
}

func run(configFile string) error {
	if configFile == "" {
		return fmt.Errorf("--config is required")
	}
	raw, err := os.ReadFile(configFile)
	if err != nil {
		return err
	}
	var cfg config
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("reading %s: %w", configFile, err)
	}
	if cfg.Webhook.Host == "" || cfg.Webhook.Port == 0 || cfg.Health.HealthProbeBindAddress == "" {
		return fmt.Errorf("%s: webhook.host, webhook.port and health.healthProbeBindAddress are required", configFile)
	}
	rest, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}

	scheme := apiruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(rest, ctrl.Options{
		Scheme:  scheme,
		Client:  client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    cfg.Webhook.Host,
			Port:    cfg.Webhook.Port,
			CertDir: cfg.Webhook.CertDir,
		}),
		HealthProbeBindAddress: cfg.Health.HealthProbeBindAddress,
		LeaderElection:         false,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	started := mgr.GetWebhookServer().StartedChecker()
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error { return started(req) }); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	runtimes, err := runtimecore.New(ctx, mgr.GetClient(), mgr.GetFieldIndexer())
	if err != nil {
		return fmt.Errorf("initializing the runtimes: %w", err)
	}
	if name, err := controller.SetupControllers(mgr, runtimes, ctrlpkg.Options{}); err != nil {
		return fmt.Errorf("setting up controller %s: %w", name, err)
	}
	if name, err := webhooks.Setup(mgr, runtimes); err != nil {
		return fmt.Errorf("setting up webhook %s: %w", name, err)
	}
	return mgr.Start(ctx)
}
