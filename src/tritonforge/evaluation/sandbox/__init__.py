"""The untrusted side: every module here is loaded in the candidate's process (the fork server
and each sandboxed worker forked from it), and no other module of the package is, except
`tritonforge.types`. Nothing here decides a verdict: the worker
reports what it saw; the judge (evaluation/judge/) decides. docs/security.md lists each module.
"""
