"""(built-in operators: optimizer; being written)"""
__all__: list = []
