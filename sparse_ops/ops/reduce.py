"""(built-in operators: reduce; being written)"""
__all__: list = []
