// Placeholder backend until the CUPTI capture lands: the agent answers every capture request
// with a clear CUPTI-unavailable failure.
#include "agent/agent.h"

namespace profagent {
CaptureHandler* CreateCaptureHandler(Agent*) { return nullptr; }
}  // namespace profagent
