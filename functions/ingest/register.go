package ingest

import "github.com/GoogleCloudPlatform/functions-framework-go/functions"

func init() {
	functions.CloudEvent("IngestFleetEvents", IngestFleetEvents)
}
