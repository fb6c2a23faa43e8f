// Renderers of a Report: the terminal report and the self-contained HTML report (inline SVG
// plots, no script or network needed to view it).
#pragma once

#include <string>

#include "analysis/report.h"

namespace profd::analysis {

std::string RenderText(const Report& report);
// The numbered findings as RenderText lists them (rule, evidence, advice).
std::string RenderFindings(const std::vector<Finding>& findings);
// title: shown in the page header (usually the trace path or capture id).
std::string RenderHtml(const Report& report, const std::string& title);

}  // namespace profd::analysis
