package emulatortests

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/functions/ingest"
)

// TestDeliveryFormats posts one event in each format the function accepts:
// a raw Pub/Sub push body, and Eventarc's binary and structured CloudEvents.
func TestDeliveryFormats(t *testing.T) {
	p := newPipeline(t)
	const ceType = "google.cloud.pubsub.topic.v1.messagePublished"
	source := topicSource(p.cluster)
	messageData := func(name, id string) ingest.MessagePublishedData {
		data, err := fleet.EncodeEvent(p.upsert(name, 1, 2))
		require.NoError(t, err)
		return ingest.MessagePublishedData{
			Message:      ingest.PubsubMessage{Data: data, MessageID: id, PublishTime: time.Now().UTC()},
			Subscription: "projects/" + project + "/subscriptions/eventarc",
		}
	}
	tests := []struct {
		name    string
		request func(id string) *http.Request
	}{
		{"raw push body", func(id string) *http.Request {
			body := mustJSON(t, messageData("raw", id))
			r, _ := http.NewRequest(http.MethodPost, pushURL(p.fn, p.cluster), bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			return r
		}},
		{"binary CloudEvent", func(id string) *http.Request {
			body := mustJSON(t, messageData("binary", id))
			r, _ := http.NewRequest(http.MethodPost, pushURL(p.fn, p.cluster), bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("ce-specversion", "1.0")
			r.Header.Set("ce-id", id)
			r.Header.Set("ce-type", ceType)
			r.Header.Set("ce-source", source)
			return r
		}},
		{"structured CloudEvent", func(id string) *http.Request {
			body := mustJSON(t, map[string]any{
				"specversion": "1.0", "id": id, "type": ceType, "source": source,
				"datacontenttype": "application/json", "data": messageData("structured", id),
			})
			r, _ := http.NewRequest(http.MethodPost, pushURL(p.fn, p.cluster), bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/cloudevents+json")
			return r
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "direct-" + randomHex(t, 6)
			resp, err := http.DefaultClient.Do(tt.request(id).WithContext(t.Context()))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			lines := p.fn.logs.waitMessage(t, id, ingested)
			assert.Equal(t, "created", outcomeOf(lines))
		})
	}
	for _, name := range []string{"raw", "binary", "structured"} {
		d, _ := p.doc(name)
		require.NotNil(t, d, name)
		assert.Equal(t, int64(2), d.Status.ReadyReplicas, name)
	}
}

// TestNotJSONIsAckedAndLogged bypasses the topic's schema, as a push from a
// misconfigured subscription would.
func TestNotJSONIsAckedAndLogged(t *testing.T) {
	p := newPipeline(t)
	id := "garbage-" + randomHex(t, 6)
	body := mustJSON(t, map[string]any{
		"message":      map[string]any{"data": base64.StdEncoding.EncodeToString([]byte("not json at all")), "messageId": id},
		"subscription": "projects/" + project + "/subscriptions/misconfigured",
	})
	resp, err := http.Post(pushURL(p.fn, p.cluster), "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "acknowledged: retrying cannot fix it")
	lines := p.fn.logs.waitMessage(t, id, dropped)
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0]["reason"], "decode event")
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	require.NoError(tb, err)
	return b
}
