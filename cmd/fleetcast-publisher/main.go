// Command fleetcast-publisher runs in each game cluster: it watches the
// cluster's Agones Fleets and publishes their state to Pub/Sub. See
// docs/publisher.md for its flags (or run it with -h).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"

	"cloud.google.com/go/pubsub/v2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/fleetcast/fleetcast/internal/cli"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

func main() { cli.Main("fleetcast-publisher", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "version" || args[0] == "--version") {
		if len(args) > 1 {
			return fmt.Errorf("version takes no arguments, got %q", args[1:])
		}
		fmt.Fprintf(stdout, "fleetcast-publisher %s (%s, %s/%s)\n", publisher.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	}
	cfg, printConfig, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	if printConfig {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(cfg)
	}
	log := logging.New(stdout, cfg.LogLevel)
	// client-go logs through klog: into the same JSON stream.
	klog.SetSlogLogger(log)

	kube, err := kubeConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	kube.UserAgent = "fleetcast-publisher/" + publisher.Version

	var transport publisher.Transport
	if cfg.Publish {
		client, err := pubsub.NewClient(ctx, cfg.Project, pubsubtopic.ClientOptions()...)
		if err != nil {
			return fmt.Errorf("pubsub client: %w", err)
		}
		defer client.Close()
		t := pubsubtopic.NewTransport(client, cfg.Topic)
		defer t.Stop()
		transport = t
	}

	log.Info("fleetcast publisher starting", "cluster", cfg.Cluster, "id", cfg.ID, "version", publisher.Version,
		"publish", cfg.Publish, "project", cfg.Project, "topic", cfg.Topic, "leaderElect", cfg.LeaderElect, "grpcAddr", cfg.GRPCAddr)
	pub, err := publisher.New(cfg, publisher.Deps{Kube: kube, Transport: transport, Log: log})
	if err != nil {
		return err
	}
	return pub.Run(ctx)
}

func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster kubernetes configuration (set --kubeconfig outside a cluster): %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return c, nil
}
