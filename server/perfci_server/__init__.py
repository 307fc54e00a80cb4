"""perfci server: results service, regression detection, alerts and bisection orchestration.

By domain (router / schemas / service / repository / tasks per folder), over the metric catalogue,
the result document and the pure analysis of :mod:`perfci_core`; nothing here imports the agent's
package. Its `perfci` commands (server, worker, beat, admin) are in :mod:`.cli`.
"""
