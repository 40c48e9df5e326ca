"""/filter: which of the scheduler's nodes a pod's claims fit on, and why not on the others.

The Service (extender/service.py) sequences one /filter over these parts: the pod's claims as
they arrive (`claim_arrival`), volume taints (`volume_checks`), extended-resource groups
(`extended_groups`), the request's nodes (`request_nodes`), the fit within the time budget
(`node_fit`) over the shared per-node verdicts (`outcomes`), and the nodes withheld while placed
pods are being bound (`contested`). Knows nothing of /bind (extender/bind/).
"""
