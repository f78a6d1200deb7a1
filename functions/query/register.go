package query

import "github.com/GoogleCloudPlatform/functions-framework-go/functions"

func init() {
	functions.HTTP("QueryFleets", QueryFleets)
}
