// GET /dashboard: one self-contained HTML page (no external scripts or styles) that polls
// GET /dashboard/data every second and shows, live, the requests by state and tier, KV usage
// of both tiers, policy decisions and waste over time, and per-tool wait distributions.
#pragma once

#include <string>

namespace infercept::server {

const std::string& dashboard_html();

}  // namespace infercept::server
