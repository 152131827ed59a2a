"""A real peer: the official Python SDK (PyPI `temporalio`) starts agentry's `agent_run`
workflow by name, reads its result and queries its status.

    python python_client.py ADDR NAMESPACE TASK_QUEUE WORKFLOW_ID REQUEST_JSON

Prints the result (with the `status` query's answer as `queried_status`) as JSON.
"""

import asyncio
import json
import os
import sys

from temporalio.client import Client


async def main() -> None:
    addr, namespace, task_queue, workflow_id, request = sys.argv[1:6]
    client = await Client.connect(addr, namespace=namespace)
    handle = await client.start_workflow(
        "agent_run", json.loads(request), id=workflow_id, task_queue=task_queue
    )
    result = await handle.result()
    result["queried_status"] = await handle.query("status")
    print(json.dumps(result), flush=True)


asyncio.run(main())
# The SDK's Rust core still has threads when the interpreter finalizes, and that teardown can
# crash (seen under load: SIGSEGV after the whole result was printed; the SDK's known
# temporalio/sdk-python#300, PyGILState_Release at finalization). The result is out and
# the client's work is done, so leave without finalizing; a failure above still raises and
# exits 1 with its traceback.
os._exit(0)
