/* libprofagent.so: the profd agent inside a CUDA process.
 *
 * Normally nothing calls these: the CUDA driver loads the library and calls InitializeInjection
 * when CUDA_INJECTION64_PATH points at it. Programs that prefer to link the agent explicitly call
 * profagent_start() once, early. Neither call blocks: the agent connects to profd on its own
 * thread and retries in the background when profd is not there. */
#ifndef PROFAGENT_H_
#define PROFAGENT_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Called by the CUDA driver at cuInit. Returns 1 (success) even when profd is unreachable. */
int InitializeInjection(void);

/* Starts the agent. socket_path: profd's agent socket, or NULL for $PROFD_AGENT_SOCKET or the
 * default /run/profd/agent.sock. Returns 0, or -1 when the agent was already stopped in this
 * process. Calling it again is harmless. */
int profagent_start(const char* socket_path);

/* Stops the agent's thread and closes its connection; returns at once. */
void profagent_stop(void);

/* Turns the always-on launch and memory counters' CUPTI callbacks off (0) or on (1) without
 * giving up CUPTI; for A/B overhead measurements. Returns 0, or -1 when the counters are not
 * running in this process. */
int profagent_set_counters(int enabled);

/* Turns the flight recorder on (1) or off (0) from inside the process, as `profctl recorder`
 * does, with its default span and memory bound: all the time (0, 0), or duty-cycled, duty_on_ms
 * of every duty_period_ms. Returns at once (the recorder starts and stops on its own thread);
 * 0, or -1 when the agent is not running in this process. */
int profagent_set_recorder(int on, unsigned duty_on_ms, unsigned duty_period_ms);

#ifdef __cplusplus
}
#endif

#endif /* PROFAGENT_H_ */
