package publisher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/utils/clock"
)

// Replica is one publisher replica as Check found it, from its /readyz
// and /metrics.
type Replica struct {
	Addr string
	// Ready is /readyz's verdict; Readiness its text (the reason when not
	// ready, a "degraded:" line per optional source it cannot list).
	Ready     bool
	Readiness string
	Leader    bool
	Term      int64
	// LastSnapshot is when it last stamped a snapshot (zero: never).
	LastSnapshot time.Time
	// Published and Failed count its publishes to Pub/Sub by result.
	Published, Failed int64
	// Err is why it could not be asked.
	Err error
}

// CheckOptions say what Check asks and accepts.
type CheckOptions struct {
	// SnapshotInterval is the publisher's; the leader's last snapshot
	// must be at most two of them old (and 15 s for the publish).
	SnapshotInterval time.Duration
	// Client asks the replicas; a client with a 5 s timeout when nil.
	Client *http.Client
	// Clock is the time; the system's when nil.
	Clock clock.PassiveClock
}

// Check is what the chart's helm test runs (fleetcast-publisher check):
// it asks every replica of one publisher — each address host resolves to,
// at port (a headless Service's name gives them all) — for its /readyz and
// /metrics, and says whether the cluster is being published: every
// replica answers, exactly one is the leader, the leader is ready (its
// publishing works) and stamped a snapshot within two snapshot intervals,
// and it has published to Pub/Sub. It returns what it found of each
// replica, and an error that says what is wrong, with what to look at.
func Check(ctx context.Context, host, port string, o CheckOptions) ([]Replica, error) {
	if o.SnapshotInterval <= 0 {
		return nil, errors.New("check: a snapshot interval is needed (the publisher's --snapshot-interval)")
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("check: no replica: %w", err)
	}
	slices.Sort(addrs)
	replicas := make([]Replica, len(addrs))
	for i, a := range addrs {
		replicas[i] = askReplica(ctx, o.Client, net.JoinHostPort(a, port))
	}
	return replicas, verdict(replicas, o)
}

func verdict(replicas []Replica, o CheckOptions) error {
	var errs []error
	var leaders []Replica
	for _, r := range replicas {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("replica %s does not answer: %w", r.Addr, r.Err))
			continue
		}
		if r.Leader {
			leaders = append(leaders, r)
		}
	}
	switch {
	case len(leaders) == 0 && len(errs) == 0:
		errs = append(errs, fmt.Errorf("no leader among %d replicas: none holds the Lease (the pods' logs say why; with leaderElection.enabled=false, the one replica leads)", len(replicas)))
	case len(leaders) > 1:
		errs = append(errs, fmt.Errorf("%d leaders: every replica publishes (leaderElection must be enabled with more than one replica)", len(leaders)))
	case len(leaders) == 1:
		l := leaders[0]
		maxAge := 2*o.SnapshotInterval + 15*time.Second
		switch {
		case !l.Ready:
			errs = append(errs, fmt.Errorf("the leader %s is not ready: %s", l.Addr, strings.TrimSpace(l.Readiness)))
		case l.LastSnapshot.IsZero():
			errs = append(errs, fmt.Errorf("the leader %s has stamped no snapshot yet", l.Addr))
		case o.Clock.Since(l.LastSnapshot) > maxAge:
			errs = append(errs, fmt.Errorf("the leader %s's last snapshot is %s old (at most %s with a snapshot interval of %s)",
				l.Addr, o.Clock.Since(l.LastSnapshot).Round(time.Second), maxAge, o.SnapshotInterval))
		case l.Published == 0:
			errs = append(errs, fmt.Errorf("the leader %s has published nothing to Pub/Sub (%d failed: its identity's roles/pubsub.publisher on the topic, the topic's existence)", l.Addr, l.Failed))
		}
	}
	return errors.Join(errs...)
}

// askReplica reads one replica's /readyz and /metrics.
func askReplica(ctx context.Context, c *http.Client, addr string) Replica {
	r := Replica{Addr: addr}
	status, body, err := get(ctx, c, "http://"+addr+"/readyz")
	if err != nil {
		r.Err = err
		return r
	}
	r.Ready, r.Readiness = status == http.StatusOK, body
	status, body, err = get(ctx, c, "http://"+addr+"/metrics")
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("/metrics: %d", status)
	}
	if err != nil {
		r.Err = err
		return r
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		r.Err = fmt.Errorf("/metrics: %w", err)
		return r
	}
	value := func(name string) float64 {
		if f := families[name]; f != nil && len(f.GetMetric()) > 0 {
			return metricValue(f.GetMetric()[0])
		}
		return 0
	}
	r.Leader = value("fleetcast_publisher_leader") == 1
	r.Term = int64(value("fleetcast_publisher_term"))
	if s := value("fleetcast_publisher_last_snapshot_timestamp_seconds"); s > 0 {
		sec, frac := int64(s), s-float64(int64(s))
		r.LastSnapshot = time.Unix(sec, int64(frac*1e9))
	}
	if f := families["fleetcast_publisher_publishes_total"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "result" {
					continue
				}
				if l.GetValue() == "ok" {
					r.Published += int64(metricValue(m))
				} else {
					r.Failed += int64(metricValue(m))
				}
			}
		}
	}
	return r
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

func get(ctx context.Context, c *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), err
}

// String is the replica as the check prints it, one line.
func (r Replica) String() string {
	if r.Err != nil {
		return fmt.Sprintf("%s: %v", r.Addr, r.Err)
	}
	role := "follower"
	if r.Leader {
		role = "leader, term " + strconv.FormatInt(r.Term, 10)
	}
	snap := "no snapshot"
	if !r.LastSnapshot.IsZero() {
		snap = "last snapshot " + r.LastSnapshot.UTC().Format(time.RFC3339)
	}
	ready := "ready"
	if !r.Ready {
		ready = "not ready: " + strings.TrimSpace(r.Readiness)
	}
	return fmt.Sprintf("%s: %s, %s, %s, %d published, %d failed", r.Addr, role, ready, snap, r.Published, r.Failed)
}
