// GET /dashboard: one self-contained HTML page (no external scripts or styles) that polls
// GET /dashboard/data every second and shows, live, the requests by state and tier, KV usage
// of both tiers, policy decisions and waste over time (charts with axes, units and legends),
// and per-tool wait distributions.
#pragma once

#include <string>

namespace infercept::server {

const std::string& dashboard_html();

// What GET /dashboard answers (401) when the server has API keys and the request brings none
// that is valid: a page that says how to pass one (`?api_key=KEY` in the address, or the
// `Authorization: Bearer KEY` header) with a form that opens the dashboard with a key.
// `key_given`: a key came and was refused (else none came).
std::string dashboard_key_page(bool key_given);

}  // namespace infercept::server
