// The gateway's one page (client/gateway.h): what a Grafana data link opens. Server-rendered with
// what will be captured; its script starts the capture with a POST to the JSON API (GET itself
// changes nothing) when the link asks for it (start=1) or the button is pressed, then polls the
// capture and shows each node's progress, the result, and the links to the report and the
// traces. Every link is relative, so the gateway may sit under a proxy's path prefix.
#pragma once

#include <string>

namespace profctl {

// name_space, pod and duration as the query gave them (checked, escaped here); start: press the
// button on load. error: shown instead of the button (a bad query).
std::string CapturePage(const std::string& name_space, const std::string& pod,
                        const std::string& duration, bool start, const std::string& error);

}  // namespace profctl
