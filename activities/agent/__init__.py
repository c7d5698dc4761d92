"""The agent proposer's activities: the conversation's model calls, its tools and its transcript.

``conversation.AgentActivities`` runs on the CPU worker (prepare, model call, read tools, the
transcript); ``judge_tools.AgentJudgeTools`` on the evaluation worker (compile, run, time, ncu
through the same judge as the loop). The conversation itself is ``workflows.agent``.
"""
