"""The evaluation HTTP service and its client: queue, cache, quarantine, metrics, the KernelBench
compatible /eval endpoint, and the async client rollouts use. Trusted; never loads candidate
code (that happens in evaluation/judge/ through evaluation/sandbox/).
"""
