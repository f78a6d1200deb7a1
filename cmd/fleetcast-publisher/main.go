// Command fleetcast-publisher runs in each game cluster: it watches the
// cluster's Agones Fleets and publishes their state to Pub/Sub. See
// docs/publisher.md for its flags (or run it with -h).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/fleetcast/fleetcast/internal/cli"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/publisher"
	"github.com/fleetcast/fleetcast/pubsubtopic"
	"github.com/fleetcast/fleetcast/telemetry"
	"github.com/fleetcast/fleetcast/version"
)

func main() { cli.Main("fleetcast-publisher", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "version" || args[0] == "--version") {
		if len(args) > 1 {
			return fmt.Errorf("version takes no arguments, got %q", args[1:])
		}
		fmt.Fprintln(stdout, version.String("fleetcast-publisher"))
		return nil
	}
	if len(args) > 0 && args[0] == "check" {
		return runCheck(ctx, args[1:], stdout, stderr)
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
	log := logging.New(stdout, cfg.LogLevel, logging.WithProject(cfg.Project))
	// client-go logs through klog: into the same JSON stream.
	klog.SetSlogLogger(log)
	tracing, err := telemetry.Start(ctx, telemetry.Config{
		Service: "fleetcast-publisher", Version: version.Version(), Project: cfg.Project, SampleRatio: cfg.TraceSampleRatio,
	}, telemetry.WithGetenv(getenv))
	if err != nil {
		return err
	}
	defer func() {
		// Export what the shutdown's last publishes traced.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(ctx); err != nil {
			log.Warn("traces not exported at shutdown", logging.KeyError, err.Error())
		}
	}()

	kube, err := kubeConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	kube.UserAgent = "fleetcast-publisher/" + version.Version()

	var transport publisher.Transport
	if cfg.Publish {
		// The client's own OpenTelemetry spans (batching, the publish
		// RPC) join each publish's trace.
		client, err := pubsub.NewClientWithConfig(ctx, cfg.Project, &pubsub.ClientConfig{EnableOpenTelemetryTracing: true}, pubsubtopic.ClientOptions()...)
		if err != nil {
			return fmt.Errorf("pubsub client: %w", err)
		}
		defer client.Close()
		t := pubsubtopic.NewTransport(client, cfg.Topic)
		defer t.Stop()
		transport = t
	}

	log.Info("fleetcast publisher starting", "cluster", cfg.Cluster, "id", cfg.ID, "version", version.Version(),
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
