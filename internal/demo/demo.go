// Package demo runs the whole fleetcast pipeline on one machine: the
// Firestore and Pub/Sub emulators (started by make demo), a local
// Kubernetes control plane with the Fleet CRD, the ingest and query
// functions served by the Functions Framework, three publishers as three
// clusters, and a simulator playing the Agones controller in each. It shows
// the live view across clusters until its time is up or it is interrupted,
// and then stops everything it started.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/pubsub/v2"
	schema "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetclient"
	"github.com/fleetcast/fleetcast/fleetfeed"
	"github.com/fleetcast/fleetcast/fleetwatch"
	"github.com/fleetcast/fleetcast/internal/testenv/controlplane"
	"github.com/fleetcast/fleetcast/internal/testenv/emulator"
	"github.com/fleetcast/fleetcast/internal/testenv/proc"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
	"github.com/fleetcast/fleetcast/publisher"
	"github.com/fleetcast/fleetcast/pubsubtopic"
)

// Project is the demo's Google Cloud project on the emulators.
const Project = "fleetcast-demo"

// Clusters are the demo's game clusters and their regions.
var Clusters = []struct{ Name, Region string }{
	{"eu-west", "europe-west1"}, {"us-east", "us-east1"}, {"asia", "asia-northeast1"},
}

// Options configure a demo run.
type Options struct {
	// Duration ends the demo by itself; 0 runs until ctx ends.
	Duration time.Duration
	// Out receives progress and the live view.
	Out io.Writer
	// Interactive redraws the table in place (a terminal); otherwise a
	// summary line is printed every few seconds.
	Interactive bool
	// ModuleDir is the fleetcast module's root, to build the functions.
	ModuleDir string
	// Ready, if set, is called with the query API's URL once everything runs.
	Ready func(queryURL string)
	// Screenshots, if set, is the directory the dashboard's pictures are
	// written into (DashboardPNG, VersionsPNG), 15 s after everything
	// runs; the Duration must leave time for it.
	Screenshots string
}

// Run runs the demo. With a Duration, it checks at the end that fleets of
// every cluster reached Firestore and the query API, and fails if not.
func Run(ctx context.Context, opts Options) error {
	out := opts.Out
	say := func(format string, args ...any) { fmt.Fprintf(out, "» "+format+"\n", args...) }
	for _, env := range []string{emulator.FirestoreHostEnv, emulator.PubSubHostEnv, controlplane.APIServerEnv, controlplane.EtcdEnv} {
		if os.Getenv(env) == "" {
			return fmt.Errorf("%s is not set: run the demo with make demo, which starts the emulators and builds the control plane", env)
		}
	}
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	tmp, err := os.MkdirTemp("", "fleetcast-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	say("starting a Kubernetes control plane (etcd + kube-apiserver) with the Fleet CRD")
	cp, err := controlplane.StartWithAgonesCRDs()
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	defer cp.Stop()
	say("kube-apiserver at %s (kubeconfig %s)", cp.URL, cp.Kubeconfig)

	ps, err := pubsub.NewClient(ctx, Project)
	if err != nil {
		return err
	}
	defer ps.Close()
	say("creating the change feed's topic %s: the ingest function announces what it writes, the query side follows it", fleetfeed.DefaultTopic)
	if err := fleetfeed.EnsureTopic(ctx, ps, fleetfeed.DefaultTopic); err != nil {
		return err
	}

	say("building and serving the Cloud Functions (Functions Framework)")
	bin := filepath.Join(tmp, "functions")
	if err := proc.Build(ctx, opts.ModuleDir, "./cmd/fleetcast-functions", bin); err != nil {
		return err
	}
	ingestURL, stopIngest, err := serveFunction(ctx, bin, "IngestFleetEvents")
	if err != nil {
		return err
	}
	defer stopIngest()
	queryURL, stopQuery, err := serveFunction(ctx, bin, "QueryFleets")
	if err != nil {
		return err
	}
	defer stopQuery()

	say("creating each cluster's Avro-validated topic and its push subscription into IngestFleetEvents")
	schemas, err := schema.NewSchemaClient(ctx, emulator.EmulatorOptions(os.Getenv(emulator.PubSubHostEnv))...)
	if err != nil {
		return err
	}
	defer schemas.Close()
	// Each cluster publishes to its own topic, fleet-events-<cluster>: the
	// ingest function lets a delivery write only its topic's cluster. A
	// run's subscriptions get a suffix of their own.
	run := time.Now().UnixNano() % 1_000_000
	transports := map[string]*pubsubtopic.Transport{}
	for _, c := range Clusters {
		topic := publisher.DefaultTopicPrefix + c.Name
		if err := pubsubtopic.EnsureTopic(ctx, ps, schemas, topic, "fleet-event"); err != nil {
			return err
		}
		if _, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
			Name:                  fmt.Sprintf("projects/%s/subscriptions/%s-ingest-%d", Project, topic, run),
			Topic:                 pubsubtopic.TopicName(Project, topic),
			PushConfig:            &pubsubpb.PushConfig{PushEndpoint: ingestURL + "/" + pubsubtopic.TopicName(Project, topic)},
			AckDeadlineSeconds:    10,
			EnableMessageOrdering: true,
		}); err != nil {
			return fmt.Errorf("create push subscription of %s: %w", topic, err)
		}
		t := pubsubtopic.NewTransport(ps, topic)
		defer t.Stop()
		transports[c.Name] = t
	}

	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	// The simulators play Agones' controllers: a fleet's every change
	// writes its status and its sets', a scale its autoscaler's too, which
	// client-go's default rate limit (5 a second) would hold back until the
	// demo ends.
	simConfig := cp.RESTConfig()
	simConfig.QPS, simConfig.Burst = 200, 400
	dyn, err := dynamic.NewForConfig(simConfig)
	if err != nil {
		return fmt.Errorf("simulator client: %w", err)
	}
	var wg sync.WaitGroup
	work, stopWork := context.WithCancel(ctx)
	defer func() { stopWork(); wg.Wait() }()
	errs := make(chan error, 2*len(Clusters))
	for i, c := range Clusters {
		ns := "games-" + c.Name
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
		cfg := publisher.DefaultConfig()
		cfg.Cluster, cfg.ClusterLabels, cfg.Project, cfg.Namespaces = c.Name, map[string]string{"region": c.Region}, Project, []string{ns}
		cfg.Topic, cfg.ID, cfg.LeaseNamespace = publisher.DefaultTopicPrefix+c.Name, "publisher-"+c.Name, ns
		cfg.SnapshotInterval, cfg.ShutdownGrace = 10*time.Second, 3*time.Second // a livelier heartbeat, a quicker Ctrl-C
		cfg.MetricsAddr, cfg.PublisherVersion = "", "demo"
		say("publisher of cluster %s watching namespace %s", c.Name, ns)
		pub, err := publisher.New(cfg, publisher.Deps{Kube: cp.RESTConfig(), Transport: transports[c.Name], Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			return fmt.Errorf("publisher %s: %w", c.Name, err)
		}
		wg.Go(func() {
			if err := pub.Run(work); err != nil {
				errs <- fmt.Errorf("publisher %s: %w", c.Name, err)
			}
		})
		sim := &simulator{dyn: dyn, ns: ns, region: c.Region, rng: rand.New(rand.NewPCG(uint64(i), 42)),
			logf: func(format string, args ...any) {
				if !opts.Interactive {
					say(format, args...)
				}
			}}
		wg.Go(func() {
			if err := sim.run(work, 700*time.Millisecond); err != nil {
				errs <- fmt.Errorf("simulator %s: %w", c.Name, err)
			}
		})
	}

	fs, err := firestore.NewClient(ctx, Project)
	if err != nil {
		return err
	}
	defer fs.Close()
	view, err := fleetwatch.Watch(work, fs, fleetwatch.Options{StaleAfter: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	say("everything runs. The dashboard, live: %s/", queryURL)
	say("Try, in another terminal:")
	say("  curl -s '%s/v1/fleets?selector=platform=pc' | jq", queryURL)
	say("  curl -s '%s/v1/labels/version' | jq", queryURL)
	say("  curl -s '%s/v1/clusters' | jq", queryURL)
	say("  curl -s '%s/metrics' | grep ready_replicas     # what scalers and Grafana read", queryURL)
	say("  GOOGLE_CLOUD_PROJECT=%s FIRESTORE_EMULATOR_HOST=%s go run ./cmd/fleetcast watch -l platform=pc",
		Project, os.Getenv(emulator.FirestoreHostEnv))
	if opts.Ready != nil {
		opts.Ready(queryURL)
	}
	shots := make(chan error, 1)
	if opts.Screenshots != "" {
		go func() { shots <- screenshots(ctx, queryURL, opts.Screenshots, say) }()
	} else {
		shots <- nil
	}

	show(ctx, out, view, opts.Interactive, errs)
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := <-shots; err != nil {
		return err
	}
	if opts.Duration > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return verify(out, queryURL)
	}
	say("stopping")
	return nil
}

// show displays the live view until ctx ends (or a component fails).
func show(ctx context.Context, out io.Writer, view *fleetwatch.View, interactive bool, errs chan error) {
	every := 5 * time.Second
	if interactive {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errs:
			errs <- err
			return
		case <-t.C:
		}
		fleets := view.Fleets(nil)
		if !interactive {
			per := map[string]int{}
			var ready int64
			for _, f := range fleets {
				per[f.Cluster]++
				ready += f.ReadyReplicas
			}
			var parts []string
			for _, c := range Clusters {
				parts = append(parts, fmt.Sprintf("%s=%d", c.Name, per[c.Name]))
			}
			fmt.Fprintf(out, "» t+%s: %d fleets (%s), %d ready game servers\n", time.Since(start).Round(time.Second), len(fleets), strings.Join(parts, " "), ready)
			continue
		}
		fmt.Fprint(out, "\033[H\033[2J")
		tw := tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tNAMESPACE\tNAME\tVERSION\tREADY\tALLOCATED\tREPLICAS\tROOMS FREE\tLAG\tSTALE")
		for _, f := range fleets {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d/%d\t%s\t%t\n", f.Cluster, f.Namespace, f.Name, f.Labels["version"],
				f.ReadyReplicas, f.AllocatedReplicas, f.Replicas, f.Counters["rooms"].Available, f.Counters["rooms"].Capacity,
				(time.Duration(f.LagMillis) * time.Millisecond).String(), f.Stale)
		}
		_ = tw.Flush()
		fmt.Fprintf(out, "\n%d fleets across %d clusters — live from Firestore (fleetwatch). Ctrl-C stops the demo.\n", len(fleets), len(Clusters))
	}
}

// verify checks, through the query API, that every cluster reported in
// and has fleets. The demo's context has ended by then: it has its own.
func verify(out io.Writer, queryURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api, err := fleetclient.New(nil, queryURL) // a local runner: no ID token
	if err != nil {
		return err
	}
	clusters, err := api.ListClusters(ctx)
	if err != nil {
		return fmt.Errorf("demo check: %w", err)
	}
	fleets, err := fleetapi.AllFleets(ctx, api, fleetapi.NewQuery())
	if err != nil {
		return fmt.Errorf("demo check: %w", err)
	}
	per := map[string]int{}
	rollouts, scaled := 0, 0
	for _, f := range fleets {
		per[f.Cluster]++
		if f.Rollout != nil {
			rollouts++
		}
		if len(f.Autoscalers) > 0 {
			scaled++
		}
	}
	var missing []string
	for _, c := range Clusters {
		if per[c.Name] == 0 || !slices.ContainsFunc(clusters.Items, func(x fleetapi.Cluster) bool { return x.Cluster == c.Name }) {
			missing = append(missing, c.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("demo check failed: no fleets or no heartbeat from %v in the query API", missing)
	}
	if rollouts == 0 || scaled == 0 {
		return fmt.Errorf("demo check failed: of %d fleets, %d show a rollout and %d an autoscaler in the query API", len(fleets), rollouts, scaled)
	}
	scraped, ready, err := scrapeReady(ctx, queryURL)
	if err != nil {
		return fmt.Errorf("demo check: %w", err)
	}
	var want int64
	for _, f := range fleets {
		want += f.ReadyReplicas
	}
	if scraped != len(fleets) || ready != float64(want) {
		return fmt.Errorf("demo check failed: /metrics has %d fleets and %v ready game servers, the query API %d and %d", scraped, ready, len(fleets), want)
	}
	fmt.Fprintf(out, "» check passed: the query API serves %d fleets from %d clusters, %d with their rollout and %d with their autoscaler; /metrics counts the same %d ready game servers\n",
		len(fleets), len(clusters.Items), rollouts, scaled, want)
	return nil
}

// scrapeReady reads /metrics as Prometheus does and returns its fleets'
// count and their ready game servers.
func scrapeReady(ctx context.Context, queryURL string) (int, float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, queryURL+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := testhttp.Client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("/metrics: %w", err)
	}
	mf := mfs["fleetcast_fleet_ready_replicas"]
	if mf == nil {
		return 0, 0, errors.New("/metrics: no fleetcast_fleet_ready_replicas")
	}
	var ready float64
	for _, m := range mf.GetMetric() {
		ready += m.GetGauge().GetValue()
	}
	return len(mf.GetMetric()), ready, nil
}

// serveFunction runs the local Functions Framework runner for target and
// waits until it listens.
func serveFunction(ctx context.Context, bin, target string) (string, func(), error) {
	port, err := proc.FreePort()
	if err != nil {
		return "", nil, err
	}
	fn, err := proc.Start(target, bin, proc.Options{
		Env: []string{"FUNCTION_TARGET=" + target, "PORT=" + port, "GOOGLE_CLOUD_PROJECT=" + Project, "LOG_LEVEL=WARNING", "STALE_AFTER=30s",
			"CHANGE_TOPIC=" + fleetfeed.DefaultTopic},
	})
	if err != nil {
		return "", nil, err
	}
	if err := fn.WaitReady(ctx, 30*time.Second, proc.Listening("127.0.0.1:"+port)); err != nil {
		fn.Stop()
		return "", nil, err
	}
	return "http://127.0.0.1:" + port, fn.Stop, nil
}
