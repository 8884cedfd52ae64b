"""The agent: errands' pure rules, deterministic so workflow code imports them directly.

Control-call parsing (``control``), asking the user (``asking``), the catalog a round renders
(``catalog``), every prompt (``prompts``), previews and ``read_message`` (``reading``), the advisor
(``advisor``), side questions (``side_questions``), context budgets (``context``), the model catalog
(``model_catalog``) and prices (``pricing``), subtask types (``subtask_types``), Python work tools
(``tools``), approvals' texts (``approvals``) and the checks every frontend shares
(``validation``, ``schema_check``). Nothing here does I/O; everything imports only
``errands.contracts`` and ``errands.errors`` below it.
"""
