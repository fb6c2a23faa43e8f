// How every capture folder ends, whether its capture finished or a profd that started again
// recovered it after a kill (capture_recovery.cc): the report's summary, each process's event
// count, summary.json and manifest.json, then the store. One sequence for both, so a recovered
// capture is stored, listed and reported as any other.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "analysis/report.h"
#include "daemon/capture/capture_folder.h"
#include "daemon/capture/capture_orchestrator.h"
#include "profd/v1/profd.pb.h"

namespace profd {

// The capture's summary, from the same analysis as its summary.json: one definition of the
// window, each GPU's busy share and the kernel table for `profctl capture`, `show`, `report` and
// summary.json (docs/ANALYSIS.md).
v1::CaptureSummary SummaryOf(const analysis::Report& report, uint64_t dropped_records);

// summary.json (the report, or the capture's summary alone when there is none), each process's
// events as the report counted its trace, manifest.json; then the folder is no longer unfinished
// and goes to the store (options.on_complete), which says where it now lives or why it could not
// take it. An error means the manifest was not written: the caller removes the folder or says so.
absl::Status CloseCaptureFolder(const absl::StatusOr<analysis::Report>& report,
                                uint64_t dropped_records, const CaptureOptions& options,
                                const CaptureFolder& folder, v1::CaptureInfo* info);

}  // namespace profd
