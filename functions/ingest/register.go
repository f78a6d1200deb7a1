package ingest

import "github.com/GoogleCloudPlatform/functions-framework-go/functions"

func init() {
	functions.HTTP("IngestFleetEvents", IngestFleetEvents)
}
