// Package ingest is the IngestFleetEvents Cloud Function: it receives fleet
// events from Pub/Sub (as Eventarc CloudEvents, binary or structured, or as
// raw Pub/Sub push bodies, which the Functions Framework converts) and
// applies them to Firestore.
//
// It acknowledges what can never succeed (malformed or invalid events) after
// one ERROR log line naming the message, and returns an error, so that
// Pub/Sub redelivers, only for what may succeed later.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/fleetcast/fleetcast/firestoredb"
	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/fnruntime"
	"github.com/fleetcast/fleetcast/logging"
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

// Applier applies one validated event to the store.
type Applier interface {
	Apply(ctx context.Context, ev fleet.Event) (firestoredb.Result, error)
}

var _ Applier = (*firestoredb.Store)(nil)

// Handler handles fleet event CloudEvents.
type Handler struct {
	store   Applier
	log     *slog.Logger
	timeout time.Duration
}

// NewHandler returns a Handler applying events to store, logging to log,
// and giving each event at most timeout.
func NewHandler(store Applier, log *slog.Logger, timeout time.Duration) *Handler {
	return &Handler{store: store, log: log, timeout: timeout}
}

// Handle processes one CloudEvent. A nil return acknowledges the message.
func (h *Handler) Handle(ctx context.Context, e event.Event) error {
	var msg MessagePublishedData
	if err := e.DataAs(&msg); err != nil {
		h.log.ErrorContext(ctx, "dropping event: data is not a Pub/Sub message",
			logging.KeyMessageID, e.ID(), logging.KeyReason, err.Error())
		return nil
	}
	id := msg.Message.MessageID
	if id == "" {
		id = e.ID()
	}
	ev, err := fleet.DecodeEvent(msg.Message.Data)
	if err != nil {
		h.log.ErrorContext(ctx, "dropping invalid fleet event",
			logging.KeyMessageID, id, logging.KeyReason, err.Error())
		return nil
	}
	attrs := []any{
		logging.KeyMessageID, id,
		logging.KeyKind, string(ev.Kind),
		logging.KeyCluster, ev.Cluster,
		logging.KeyVersion, ev.Version.String(),
	}
	if ev.Kind != fleet.KindSnapshot {
		attrs = append(attrs, logging.KeyFleet, ev.Key().DocID())
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	res, err := h.store.Apply(ctx, ev)
	if errors.Is(err, fleet.ErrInvalid) {
		h.log.ErrorContext(ctx, "dropping invalid fleet event", append(attrs, logging.KeyReason, err.Error())...)
		return nil
	}
	if err != nil {
		// Transient: Firestore unavailable, contention beyond the
		// transaction's retries, a timeout. Pub/Sub redelivers.
		h.log.WarnContext(ctx, "fleet event not applied; asking for redelivery", append(attrs, logging.KeyError, err.Error())...)
		return fmt.Errorf("apply message %s: %w", id, err)
	}
	attrs = append(attrs, logging.KeyWrites, res.Writes, logging.KeyLagMillis, res.LagMillis)
	if ev.Kind == fleet.KindSnapshot {
		attrs = append(attrs, logging.KeyOutcome, "reconciled", "tombstoned", res.Tombstoned, "clusterUpdated", res.ClusterUpdated,
			"part", ev.Snapshot.Part, "parts", ev.Snapshot.Parts)
	} else {
		attrs = append(attrs, logging.KeyOutcome, string(res.Outcome))
	}
	h.log.InfoContext(ctx, "fleet event ingested", attrs...)
	return nil
}

// Config is the function's configuration, read from the environment once.
type Config struct {
	// TombstoneRetention is how long tombstones live before TTL removes them.
	TombstoneRetention time.Duration
	// EventTimeout bounds the work on one event.
	EventTimeout time.Duration
	// LogLevel is the minimum severity logged.
	LogLevel slog.Level
}

// ConfigFromEnv reads the configuration (see the README's table); the
// Firestore database is fnruntime.Firestore's.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	var err error
	if c.TombstoneRetention, err = fnruntime.Duration(getenv, "TOMBSTONE_RETENTION", fleet.DefaultTombstoneRetention); err != nil {
		return Config{}, err
	}
	if c.EventTimeout, err = fnruntime.Duration(getenv, "EVENT_TIMEOUT", 50*time.Second); err != nil {
		return Config{}, err
	}
	if c.LogLevel, err = logging.ParseLevel(getenv("LOG_LEVEL")); err != nil {
		return Config{}, fmt.Errorf("LOG_LEVEL: %w", err)
	}
	return c, nil
}

// defaultHandler is the handler the registered function uses: one
// Firestore client per instance, created on the first event.
var defaultHandler = fnruntime.Lazy[*Handler]{New: func(ctx context.Context) (*Handler, error) {
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("configure IngestFleetEvents: %w", err)
	}
	client, err := fnruntime.Firestore(ctx, os.Getenv)
	if err != nil {
		return nil, err
	}
	return NewHandler(firestoredb.New(client, cfg.TombstoneRetention, time.Now), logging.New(os.Stdout, cfg.LogLevel), cfg.EventTimeout), nil
}}

// IngestFleetEvents is the Cloud Function's entry point.
func IngestFleetEvents(ctx context.Context, e event.Event) error {
	h, err := defaultHandler.Get(ctx)
	if err != nil {
		logging.New(os.Stdout, slog.LevelInfo).ErrorContext(ctx, "IngestFleetEvents cannot start", logging.KeyError, err.Error())
		return err
	}
	return h.Handle(ctx, e)
}
