output "topics" {
  description = "Each cluster's fleet events topic."
  value       = module.fleetcast.topics
}

output "query_url" {
  description = "Base URL of the query API."
  value       = module.fleetcast.query_url
}

output "publisher_service_accounts" {
  description = "The publisher's Google service account per cluster."
  value       = module.fleetcast.publisher_service_accounts
}

output "publisher_flags" {
  description = "The fleetcast-publisher flags per cluster."
  value       = module.fleetcast.publisher_flags
}

output "dead_letter_subscription" {
  description = "Where undeliverable fleet events wait for inspection."
  value       = module.fleetcast.dead_letter_subscription
}

output "publisher_chart_values" {
  description = "The publisher Helm chart's values per cluster (terraform output -json publisher_chart_values | jq '.CLUSTER' > values.yaml)."
  value       = module.fleetcast.publisher_chart_values
}
