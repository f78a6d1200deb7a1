// Package bill prices a deployment of fleetcast, and of the per-event
// broadcaster it replaces, from what one benchmark run measured: per
// component, a monthly quantity (a formula of the deployment's sizes and
// the measured costs per unit of work) times a list price.
//
// The list prices are kept in one dated table (Prices), the deployment's
// sizes in another (Reference); BENCHMARKS.md renders both with every
// line's formula, so a reader can put in their own.
package bill

import "time"

// PriceTable is a dated set of Google Cloud list prices, in US dollars.
type PriceTable struct {
	// Date is when the prices were read from Sources.
	Date string
	// Sources are the pages the prices come from.
	Sources []string
	// Where the prices apply.
	FirestoreLocation, RunTier string

	// Firestore (Standard edition), per 100 000 documents.
	FirestoreReadsPer100k, FirestoreWritesPer100k, FirestoreDeletesPer100k float64
	// Pub/Sub throughput, per TiB, published and delivered alike; each
	// publish, push or pull request is billed at least PubSubMinBytes.
	PubSubPerTiB   float64
	PubSubMinBytes float64
	// Cloud Run functions (request-based billing, CPU allocated only while
	// requests are served), per vCPU-second, per GiB-second and per
	// million requests; instance time is rounded up to RunRounding.
	RunPerVCPUSecond, RunPerGiBSecond, RunPerMillionRequests float64
	RunRounding                                              time.Duration
	// Cloud Run services with instance-based billing (CPU always
	// allocated): every second of an instance's life, no request fee.
	RunInstancePerVCPUSecond, RunInstancePerGiBSecond float64
	// Cloud Logging ingestion, per GiB.
	LoggingPerGiB float64
	// Cloud Trace, per million spans ingested (past its 2.5 million free
	// a month, left out as the other free tiers are).
	TracePerMillionSpans float64
	// Managed Service for Prometheus, per million samples ingested (its
	// first tier, to 50 billion a month).
	PrometheusPerMillionSamples float64
	// Cloud Monitoring alerting, per condition a month and per million
	// time series its executions return.
	AlertPerCondition, AlertPerMillionSeries float64
}

// Prices are the list prices this repository's bill uses. Free tiers
// (Firestore's daily quota, Pub/Sub's first 10 GiB, Cloud Run's first
// 180 000 vCPU-seconds, Logging's first 50 GiB, Cloud Trace's first 2.5
// million spans) are left out: at the
// reference deployment's sizes they are a few dollars.
var Prices = PriceTable{
	Date: "2026-12-01",
	Sources: []string{
		"https://cloud.google.com/firestore/pricing",
		"https://cloud.google.com/pubsub/pricing",
		"https://cloud.google.com/run/pricing",
		"https://cloud.google.com/stackdriver/pricing",
		"https://cloud.google.com/trace/pricing",
		"https://cloud.google.com/monitoring/alerts/cost-control",
	},
	// The Terraform module's default firestore_location is eur3, a
	// multi-region; a regional database (such as us-central1) costs half.
	FirestoreLocation:           "multi-region (nam5, eur3; the module's default is eur3)",
	FirestoreReadsPer100k:       0.06,
	FirestoreWritesPer100k:      0.18,
	FirestoreDeletesPer100k:     0.02,
	PubSubPerTiB:                40,
	PubSubMinBytes:              1000,
	RunTier:                     "Tier 1 regions (such as us-central1, europe-west1), request-based billing",
	RunPerVCPUSecond:            0.000024,
	RunPerGiBSecond:             0.0000025,
	RunPerMillionRequests:       0.40,
	RunRounding:                 100 * time.Millisecond,
	RunInstancePerVCPUSecond:    0.000018,
	RunInstancePerGiBSecond:     0.000002,
	LoggingPerGiB:               0.50,
	TracePerMillionSpans:        0.20,
	PrometheusPerMillionSamples: 0.06,
	AlertPerCondition:           1.50,
	AlertPerMillionSeries:       0.35,
}

// Regional returns p with Firestore's prices in a regional location (such
// as us-central1 or europe-west1), half of a multi-region's.
func (p PriceTable) Regional() PriceTable {
	p.FirestoreLocation = "regional (such as us-central1, europe-west1)"
	p.FirestoreReadsPer100k, p.FirestoreWritesPer100k, p.FirestoreDeletesPer100k = 0.03, 0.09, 0.01
	return p
}
