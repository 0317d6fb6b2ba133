"""The gateway: one endpoint for every profile and model (`specctl gateway`), for every inference
API its engine serves (OpenAI's chat, completions and Responses, Anthropic's Messages,
fill-in-the-middle), each read, checked and answered in its own format.

It starts a model's server on its first request, stops idle ones after their keep-alive, keeps
the resident servers inside the memory budget (the least recently used leaves first), passes
streams through chunk by chunk, swaps in a newly tuned setting without failing a request, routes
each request to the server of its kind's winning setting where the tune's winners differ, fails
an engine found hung within seconds, and counts requests, speed and drafts per model and
setting for `/metrics`.

Layer: above `app` and `runs` (it resolves plans like `up`), below the CLI; from `measure` it
takes the classifier and the routes.
"""
