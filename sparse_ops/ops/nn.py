"""(built-in operators: nn; being written)"""
__all__: list = []
