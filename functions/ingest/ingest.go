// Package ingest is the IngestFleetEvents Cloud Function: it receives fleet
// events from Pub/Sub (raw Pub/Sub push bodies, which it turns into the
// CloudEvents the Functions Framework would, or Eventarc CloudEvents,
// binary or structured) and applies them to Firestore.
//
// It acknowledges what can never succeed (malformed or invalid events) after
// one ERROR log line naming the message, and returns an error, so that
// Pub/Sub redelivers, only for what may succeed later.
//
// Each game cluster publishes to its own topic, <TOPIC_PREFIX><cluster>,
// which only that cluster's publisher may publish to. The function takes
// the cluster a delivery may write from the topic it came through (the
// CloudEvent's source, which Eventarc sets and the Functions Framework
// derives from the push endpoint's path), never from the message alone: an
// event claiming another cluster is dropped.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/fleetfeed"
	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/logging"
	"github.com/fleetcast/fleetcast/telemetry"
)

// MessagePublishedData is the data of a google.cloud.pubsub.topic.v1.
// messagePublished CloudEvent. The Functions Framework builds it from raw
// push bodies too; the ordering key and subscription may be missing there,
// so nothing here depends on them.
type MessagePublishedData struct {
	Message      PubsubMessage `json:"message"`
	Subscription string        `json:"subscription"`
}

// PubsubMessage is a Pub/Sub message as Eventarc delivers it.
type PubsubMessage struct {
	// Data is the payload; base64 in JSON.
	Data        []byte            `json:"data"`
	Attributes  map[string]string `json:"attributes"`
	MessageID   string            `json:"messageId"`
	PublishTime time.Time         `json:"publishTime"`
	OrderingKey string            `json:"orderingKey"`
}

// Applier applies one validated event to the store, saying what it did
// in the domain's terms (firestoredb.Store is the production one).
type Applier interface {
	Apply(ctx context.Context, ev fleet.Event) (fleet.Applied, error)
}

// Announcer announces on the change feed the fleet documents an event left
// (fleet.Applied.Announce); fleetfeed.Announcer is the production one.
type Announcer interface {
	Announce(ctx context.Context, docs []*fleet.Document) error
}

// Handler handles fleet event CloudEvents.
type Handler struct {
	store    Applier
	announce Announcer
	log      *slog.Logger
	cfg      Config
	now      func() time.Time
	// dropped counts the messages this instance acknowledged without
	// applying them; every drop's log line carries it.
	dropped atomic.Int64
	// overdue counts the pushes answered unapplied because their
	// handling outlived EVENT_TIMEOUT (ServeHTTP).
	overdue atomic.Int64
	// unchanged counts the duplicates and stale events since the last
	// summary line (their own lines are DEBUG), and since the start.
	mu             sync.Mutex
	unchanged      map[fleet.Outcome]int64
	unchangedTotal map[fleet.Outcome]int64
	lastSummary    time.Time
	// share keeps one cluster from taking every request this instance
	// serves at once.
	share share
}

// SummaryInterval is how often, at most, an instance logs how many events
// it found already applied (duplicates) or outdated (stale): each of those
// is a DEBUG line of its own.
const SummaryInterval = time.Minute

// NewHandler returns a Handler applying events to store, logging to log,
// configured by cfg (TopicPrefix, MaxClockSkew, TombstoneRetention and
// EventTimeout), reading the time from now.
func NewHandler(store Applier, log *slog.Logger, cfg Config, now func() time.Time) *Handler {
	return &Handler{store: store, log: log, cfg: cfg, now: now}
}

// WithAnnouncer has h announce what each event left on the change feed
// before it acknowledges the event: an announcement that fails asks for
// the event again, whose redelivery the store answers with the same state
// to announce (a duplicate's). It returns h.
func (h *Handler) WithAnnouncer(a Announcer) *Handler {
	h.announce = a
	return h
}

// Reasons a message is dropped, in the reasonCode field of its log line.
const (
	DropNotPubSub      = "not-pubsub"
	DropUnboundTopic   = "unbound-topic"
	DropInvalid        = "invalid"
	DropForeignCluster = "foreign-cluster"
	DropClockSkew      = "clock-skew"
	DropStoreRefused   = "store-refused"
)

// drop logs why a message is acknowledged without being applied.
func (h *Handler) drop(ctx context.Context, msg, code string, attrs ...any) {
	attrs = append(attrs, logging.KeyReasonCode, code, logging.KeyDropped, h.dropped.Add(1))
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String("fleetcast.reason_code", code))
	span.SetStatus(codes.Error, msg)
	h.log.ErrorContext(ctx, msg, attrs...)
}

// SpanName is the name of the span each delivered message is applied in.
const SpanName = "fleetcast.ingest"

// tracer is the global provider's tracer, asked for each span: one kept
// from before the provider was installed would stay bound to the first
// provider ever installed (OpenTelemetry's global delegates once).
func tracer() trace.Tracer { return otel.Tracer("github.com/fleetcast/fleetcast/functions/ingest") }

// Handle processes one CloudEvent. A nil return acknowledges the message.
//
// It applies the message in a span of its own (SpanName), the child of the
// span whose W3C trace context the publisher put in the message's
// attributes (googclient_traceparent): one trace follows an event from its
// cluster to its Firestore write, whose spans the Firestore client makes
// as children of this one.
func (h *Handler) Handle(ctx context.Context, e event.Event) (err error) {
	var msg MessagePublishedData
	if err := e.DataAs(&msg); err != nil {
		h.drop(ctx, "dropping event: data is not a Pub/Sub message", DropNotPubSub,
			logging.KeyMessageID, e.ID(), logging.KeyReason, err.Error())
		return nil
	}
	id := msg.Message.MessageID
	if id == "" {
		id = e.ID()
	}
	ctx = otel.GetTextMapPropagator().Extract(ctx, telemetry.AttributeCarrier(msg.Message.Attributes))
	ctx, span := tracer().Start(ctx, SpanName, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("messaging.system", "gcp_pubsub"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.message.id", id),
		attribute.String("messaging.destination.name", e.Source()),
		attribute.Int("messaging.message.body.size", len(msg.Message.Data)),
	))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "asking for redelivery")
		}
		span.End()
	}()
	return h.handle(ctx, span, e, msg, id)
}

func (h *Handler) handle(ctx context.Context, span trace.Span, e event.Event, msg MessagePublishedData, id string) error {
	topic, topicCluster, err := ClusterOfSource(e.Source(), h.cfg.TopicPrefix)
	if err != nil {
		h.drop(ctx, "dropping event: its topic is no cluster's", DropUnboundTopic,
			logging.KeyMessageID, id, logging.KeyTopic, e.Source(), logging.KeyReason, err.Error())
		return nil
	}
	ev, err := fleet.ParseEvent(msg.Message.Data)
	if err != nil {
		h.drop(ctx, "dropping invalid fleet event", DropInvalid,
			logging.KeyMessageID, id, logging.KeyTopic, topic, logging.KeyReason, err.Error())
		return nil
	}
	release, ok := h.share.admit(topicCluster, ev.Kind == fleet.KindSnapshot, h.cfg.MaxClusterInFlight)
	if !ok {
		h.askedBack(ctx, topicCluster)
		return fmt.Errorf("message %s: %w", id, ErrOverShare)
	}
	defer release()
	attrs := []any{
		logging.KeyMessageID, id,
		logging.KeyKind, string(ev.Kind),
		logging.KeyCluster, ev.Cluster,
		logging.KeyVersion, ev.Version.String(),
	}
	span.SetAttributes(attribute.String("fleetcast.cluster", ev.Cluster), attribute.String("fleetcast.kind", string(ev.Kind)),
		attribute.String("fleetcast.version", ev.Version.String()))
	if ev.Kind != fleet.KindSnapshot {
		attrs = append(attrs, logging.KeyFleet, ev.Key().DocID())
		span.SetAttributes(attribute.String("fleetcast.fleet", ev.Key().DocID()))
	}
	if ev.Cluster != topicCluster {
		h.drop(ctx, "dropping fleet event for another cluster than its topic's", DropForeignCluster,
			append(attrs, logging.KeyTopic, topic, logging.KeyReason,
				fmt.Sprintf("cluster %q claimed on the topic of cluster %q", ev.Cluster, topicCluster))...)
		return nil
	}
	now := h.now()
	if err := fleet.CheckTimes(ev, now, h.cfg.TombstoneRetention, h.cfg.MaxClockSkew); err != nil {
		h.drop(ctx, "dropping fleet event: its publisher's clock is off", DropClockSkew,
			append(attrs, logging.KeyTopic, topic, logging.KeyReason, err.Error())...)
		return nil
	}
	if ev.Kind == fleet.KindUpsert {
		// What a publisher did not fit to the store's limits (an older
		// one, or not this code) is reduced as it would have: one
		// fleet's optional parts are lost, never the fleet.
		admitted, changed, err := fleet.Admit(ev.Fleet, now, h.cfg.MaxClockSkew)
		if err != nil {
			h.drop(ctx, "dropping invalid fleet event", DropInvalid, append(attrs, logging.KeyReason, err.Error())...)
			return nil
		}
		if changed {
			h.log.ErrorContext(ctx, "fleet event stored degraded: parts of its state dropped to fit the store's limits",
				append(attrs, logging.KeyReason, admitted.Degraded)...)
		}
		ev.Fleet = admitted
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.EventTimeout)
	defer cancel()
	res, err := h.store.Apply(ctx, ev)
	if errors.Is(err, fleet.ErrInvalid) {
		h.drop(ctx, "dropping invalid fleet event", DropInvalid, append(attrs, logging.KeyReason, err.Error())...)
		return nil
	}
	if errors.Is(err, fleet.ErrPermanent) {
		// Firestore refused it, or the stored document cannot be read:
		// redelivering would fail the same way for the subscription's
		// whole retention. The document is left as it is.
		h.drop(ctx, "dropping fleet event the store cannot apply", DropStoreRefused, append(attrs, logging.KeyReason, err.Error())...)
		return nil
	}
	if errors.Is(err, fleet.ErrStoreNotReady) {
		// Not the event's fault, nor a passing one: the operator's.
		// Redelivered until it is fixed (Terraform creates the index
		// before the functions; a new one builds in minutes).
		h.log.ErrorContext(ctx, "fleet event not applied: Firestore lacks an index this function needs; create it (terraform apply), the event is redelivered until it is ready",
			append(attrs, logging.KeyError, err.Error())...)
		return fmt.Errorf("apply message %s: %w", id, err)
	}
	if err != nil {
		// Transient: Firestore unavailable, contention beyond the
		// transaction's retries, a timeout. Pub/Sub redelivers.
		h.log.WarnContext(ctx, "fleet event not applied; asking for redelivery", append(attrs, logging.KeyError, err.Error())...)
		return fmt.Errorf("apply message %s: %w", id, err)
	}
	if h.announce != nil && len(res.Announce) > 0 {
		if err := h.announce.Announce(ctx, res.Announce); err != nil {
			// Written, but the query instances would not hear of it
			// before their next resync: asked for again, the event is
			// a duplicate, announced again.
			h.log.WarnContext(ctx, "fleet event applied but not announced on the change feed; asking for redelivery",
				append(attrs, logging.KeyOutcome, string(res.Outcome), logging.KeyError, err.Error())...)
			return fmt.Errorf("announce message %s: %w", id, err)
		}
	}
	attrs = append(attrs, logging.KeyWrites, res.Writes, logging.KeyLagMillis, res.LagMillis)
	span.SetAttributes(attribute.String("fleetcast.outcome", string(res.Outcome)), attribute.Int("fleetcast.writes", res.Writes),
		attribute.Int64("fleetcast.lag_ms", res.LagMillis))
	if ev.Kind == fleet.KindSnapshot && res.Outcome == fleet.OutcomeStale {
		// Overtaken by a newer snapshot: late, or replayed.
		h.log.DebugContext(ctx, "fleet event ingested", append(attrs, logging.KeyOutcome, string(res.Outcome),
			"part", ev.Snapshot.Part, "parts", ev.Snapshot.Parts)...)
		h.countUnchanged(ctx, res.Outcome)
		return nil
	}
	if ev.Kind == fleet.KindSnapshot {
		attrs = append(attrs, logging.KeyOutcome, "reconciled", "tombstoned", res.Tombstoned, "clusterUpdated", res.ClusterUpdated,
			"part", ev.Snapshot.Part, "parts", ev.Snapshot.Parts)
		if len(res.Unreadable) > 0 || res.ClusterRepaired {
			h.log.ErrorContext(ctx, "snapshot part reconciled around stored documents that cannot be read",
				append(attrs, "unreadable", res.Unreadable, "clusterRepaired", res.ClusterRepaired)...)
			return nil
		}
	} else {
		attrs = append(attrs, logging.KeyOutcome, string(res.Outcome))
		if !res.Outcome.Writes() {
			// Redeliveries and refreshes: routine, and as many as the
			// changes. One summary line counts them.
			h.log.DebugContext(ctx, "fleet event ingested", attrs...)
			h.countUnchanged(ctx, res.Outcome)
			return nil
		}
	}
	h.log.InfoContext(ctx, "fleet event ingested", attrs...)
	return nil
}

// ErrOverShare asks for a message again: its cluster already has its share
// of the requests this instance serves at once (Config.MaxClusterInFlight).
// Pub/Sub's push window for that cluster's subscription shrinks with each
// such answer, so a cluster flooding its topic is slowed at its source,
// and the instance keeps room for the others' events and heartbeats.
var ErrOverShare = errors.New("its cluster has its share of this instance's requests in flight; asking for it again")

// share counts each cluster's events in flight on this instance.
type share struct {
	mu        sync.Mutex
	events    map[string]int // upserts and deletes
	snapshots map[string]int
	askedBack map[string]int64 // since the last summary
	lastLog   time.Time
}

// snapshotShare bounds a cluster's snapshot parts in flight, apart from
// its other events: a heartbeat never waits behind its own cluster's
// flood, and a cluster replaying snapshots holds no more than this.
const snapshotShare = 2

// admit counts an event of cluster in flight, or refuses it when the
// cluster has max of its kind in flight already.
func (s *share) admit(cluster string, snapshot bool, max int) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events == nil {
		s.events, s.snapshots, s.askedBack = map[string]int{}, map[string]int{}, map[string]int64{}
	}
	m, limit := s.events, max
	if snapshot {
		m, limit = s.snapshots, snapshotShare
	}
	if limit > 0 && m[cluster] >= limit {
		return nil, false
	}
	m[cluster]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if m[cluster]--; m[cluster] == 0 {
			delete(m, cluster)
		}
	}, true
}

// askedBack counts a refused event, and says at most once a minute, per
// instance, which clusters were over their share and how often.
func (h *Handler) askedBack(ctx context.Context, cluster string) {
	s := &h.share
	s.mu.Lock()
	defer s.mu.Unlock()
	s.askedBack[cluster]++
	now := h.now()
	if now.Sub(s.lastLog) < SummaryInterval {
		return
	}
	h.log.WarnContext(ctx, "events asked for again: their cluster had its share of this instance's requests in flight (MAX_CLUSTER_IN_FLIGHT)",
		"byCluster", maps.Clone(s.askedBack), "sinceMillis", now.Sub(s.lastLog).Milliseconds())
	clear(s.askedBack)
	s.lastLog = now
}

// countUnchanged counts an event that changed nothing, and logs the
// counts once SummaryInterval has passed since the last summary.
func (h *Handler) countUnchanged(ctx context.Context, o fleet.Outcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unchanged == nil {
		h.unchanged, h.unchangedTotal, h.lastSummary = map[fleet.Outcome]int64{}, map[fleet.Outcome]int64{}, h.now()
	}
	h.unchanged[o]++
	h.unchangedTotal[o]++
	now := h.now()
	if now.Sub(h.lastSummary) < SummaryInterval {
		return
	}
	h.log.InfoContext(ctx, "fleet events that changed nothing",
		"duplicates", h.unchanged[fleet.OutcomeDuplicate], "stale", h.unchanged[fleet.OutcomeStale],
		"sinceMillis", now.Sub(h.lastSummary).Milliseconds(),
		"duplicatesTotal", h.unchangedTotal[fleet.OutcomeDuplicate], "staleTotal", h.unchangedTotal[fleet.OutcomeStale])
	clear(h.unchanged)
	h.lastSummary = now
}

// sourcePattern is a Pub/Sub topic as a CloudEvent's source names it.
var sourcePattern = regexp.MustCompile(`^//pubsub\.googleapis\.com/(projects/[^/]+/topics/([^/]+))$`)

// ClusterOfSource returns the topic a CloudEvent's source names
// (//pubsub.googleapis.com/projects/P/topics/T) and the cluster whose
// topic it is: T without prefix, a valid cluster name.
func ClusterOfSource(source, prefix string) (topic, cluster string, err error) {
	m := sourcePattern.FindStringSubmatch(source)
	if m == nil {
		return "", "", fmt.Errorf("source %q is not a Pub/Sub topic (//pubsub.googleapis.com/projects/P/topics/T); push to <function URL>/projects/P/topics/T", source)
	}
	topic, id := m[1], m[2]
	cluster, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return topic, "", fmt.Errorf("topic %s is not named %s<cluster> (TOPIC_PREFIX)", topic, prefix)
	}
	if err := fleet.ValidateClusterName(cluster); err != nil {
		return topic, "", fmt.Errorf("topic %s: %w", topic, err)
	}
	return topic, cluster, nil
}

// DefaultMaxClusterInFlight is Config.MaxClusterInFlight's default: half
// the default request concurrency of 8 (Terraform sets half of
// ingest_concurrency). With half, a cluster flooding its topic is asked
// again before its push window fills the instance, where Cloud Run would
// refuse every cluster's pushes alike (emulator-tests' neighbour test
// measures both).
const DefaultMaxClusterInFlight = 4

// DefaultTopicPrefix is what a cluster's topic is named before its name.
const DefaultTopicPrefix = "fleet-events-"

// Config is the function's configuration, read from the environment once.
type Config struct {
	// TombstoneRetention is how long tombstones live before TTL removes them.
	TombstoneRetention time.Duration
	// EventTimeout bounds the work on one event.
	EventTimeout time.Duration
	// TopicPrefix names each cluster's topic: <TopicPrefix><cluster>.
	TopicPrefix string
	// MaxClockSkew is how far ahead of this function's clock a publisher's
	// may run before its events are refused.
	MaxClockSkew time.Duration
	// FullReconcileEvery: one snapshot part in this many reads its
	// range's documents although its aggregation agrees.
	FullReconcileEvery int
	// FeedShards are the shards of the fleets' change feed
	// (firestoredb.Store.WithFeedShards), the query side's too.
	FeedShards int
	// ChangeTopic is the change feed's topic (fleetfeed), which the
	// function announces what it writes on; empty: none.
	ChangeTopic string
	// MaxClusterInFlight bounds one cluster's upserts and deletes in
	// flight on an instance: past it they are asked for again
	// (ErrOverShare). Below the instance's request concurrency, it keeps
	// room for every other cluster; 0: no bound.
	MaxClusterInFlight int
	// LogLevel is the minimum severity logged.
	LogLevel slog.Level
	// TraceSampleRatio is the share of traces sampled that no publisher
	// began (an event whose publisher sampled its trace, or did not, is
	// sampled as it decided); 0 exports no span.
	TraceSampleRatio float64
}

// ConfigFromEnv reads the configuration (docs/operations.md's table); the
// Firestore database is fnruntime.Firestore's.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	e := fnruntime.NewEnv(getenv)
	e.Duration(&c.TombstoneRetention, "TOMBSTONE_RETENTION", fleet.DefaultTombstoneRetention)
	e.Duration(&c.EventTimeout, "EVENT_TIMEOUT", 50*time.Second)
	e.Duration(&c.MaxClockSkew, "MAX_CLOCK_SKEW", fleet.DefaultMaxClockSkew)
	e.Int(&c.FullReconcileEvery, "FULL_RECONCILE_EVERY", firestoredb.DefaultFullReconcileEvery, 1)
	e.Int(&c.MaxClusterInFlight, "MAX_CLUSTER_IN_FLIGHT", DefaultMaxClusterInFlight, 1)
	e.FeedShards(&c.FeedShards)
	e.String(&c.TopicPrefix, "TOPIC_PREFIX", DefaultTopicPrefix)
	e.Func("CHANGE_TOPIC", func(v string) error {
		c.ChangeTopic = v
		return fleetfeed.ValidateTopicID(v)
	})
	e.Level(&c.LogLevel, "LOG_LEVEL")
	e.Ratio(&c.TraceSampleRatio, "TRACE_SAMPLE_RATIO", 0)
	return c, e.Err()
}

// New makes the handler as the function and the ingest service deploy it,
// configured by getenv (ConfigFromEnv, fnruntime.Firestore), logging to
// logs: one Firestore client, and the change feed's publisher when
// CHANGE_TOPIC is set.
func New(ctx context.Context, getenv func(string) string, logs io.Writer) (*Handler, error) {
	cfg, err := ConfigFromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("configure IngestFleetEvents: %w", err)
	}
	client, err := fnruntime.Firestore(ctx, getenv)
	if err != nil {
		return nil, err
	}
	if _, err := fnruntime.Tracing(ctx, getenv, "fleetcast-ingest", cfg.TraceSampleRatio); err != nil {
		return nil, fmt.Errorf("configure IngestFleetEvents: %w", err)
	}
	store := firestoredb.New(client, cfg.TombstoneRetention, time.Now).WithFullReconcileEvery(cfg.FullReconcileEvery).
		WithFeedShards(cfg.FeedShards)
	log := logging.New(logs, cfg.LogLevel, logging.WithProject(fnruntime.Project(getenv)))
	fnruntime.Started(log, "IngestFleetEvents")
	h := NewHandler(store, log, cfg, time.Now)
	if cfg.ChangeTopic != "" {
		ps, err := fnruntime.PubSub(ctx, getenv)
		if err != nil {
			return nil, fmt.Errorf("configure IngestFleetEvents: %w", err)
		}
		h.WithAnnouncer(fleetfeed.NewAnnouncer(ps, cfg.ChangeTopic))
	}
	return h, nil
}

// defaultHandler is the handler the registered function uses: one
// Firestore client per instance, created on the first event.
var defaultHandler = fnruntime.Lazy[*Handler]{New: func(ctx context.Context) (*Handler, error) {
	return New(ctx, os.Getenv, os.Stdout)
}}

// IngestFleetEvents is the Cloud Function's entry point: an HTTP function
// the push subscription posts to (see Handler.ServeHTTP).
func IngestFleetEvents(w http.ResponseWriter, r *http.Request) {
	h, err := defaultHandler.Get(r.Context())
	if err != nil {
		logging.New(os.Stdout, slog.LevelInfo).ErrorContext(r.Context(), "IngestFleetEvents cannot start", logging.KeyError, err.Error())
		http.Error(w, "the function is not configured; see its logs", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}
